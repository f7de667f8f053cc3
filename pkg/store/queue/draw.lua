-- draw: place one chunk of a draw's pooled registrations, in the draw order
-- the caller computed (pkg/domain/draw.Order of the revealed seed).
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:drawn     HASH window, round, commit of the last draw
-- KEYS[3] wr:{item}:pool      ZSET tokenId scored by draw window
-- KEYS[4] wr:{item}:seq       STRING FIFO sequence
-- KEYS[5] wr:{item}:waiting   ZSET tokenId scored by seq
-- ARGV[1] partition  ARGV[2] offset of the draw record  ARGV[3] draw window (unix ms)
-- ARGV[4..] tokenIds in draw order (at most 1000: Line.Draw chunks them)
-- Returns {outcome, moved}: MOVED with how many got a seq; REPLAY when the record
-- was applied before; STALE when a draw of this window or a later one is done.
-- Only tokens still in the pool with a window <= the draw's move, so running a
-- chunk again after a crash moves nobody twice. Nothing guards the offset here:
-- draw_finish.lua writes it once every chunk and the late ones are placed.
-- Until then drawn.drawing names the record ("partition:offset"): promote
-- admits nobody from a line half drawn (see the prelude's drawing).
if replayed(KEYS[1], ARGV[1], ARGV[2]) then
  return {'REPLAY', 0}
end
local window = tonumber(ARGV[3])
if window <= tonumber(redis.call('HGET', KEYS[2], 'window') or '0') then
  return {'STALE', 0}
end
local seq = tonumber(redis.call('GET', KEYS[4]) or '0')
if not seq or seq ~= math.floor(seq) then
  return redis.error_reply('ERR corrupt ' .. KEYS[4] .. ': not an integer')
end
redis.call('ZCARD', KEYS[5]) -- type-checks the line
local moved = 0
for i = 4, #ARGV do
  local w = redis.call('ZSCORE', KEYS[3], ARGV[i])
  if w and tonumber(w) <= window then
    seq = redis.call('INCR', KEYS[4])
    redis.call('ZADD', KEYS[5], 'NX', seq, ARGV[i])
    redis.call('ZREM', KEYS[3], ARGV[i])
    moved = moved + 1
  end
end
redis.call('HSET', KEYS[2], 'drawing', ARGV[1] .. ':' .. ARGV[2])
return {'MOVED', moved}
