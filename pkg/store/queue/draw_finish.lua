-- draw_finish: after a draw's pooled registrations are placed, place the late
-- ones (in record order) once every window that was pooled when they began to
-- queue (drawn.lateAfter) is drawn, then record the draw and its offset.
-- Windows pooled after that (random mode switched on meanwhile) come behind
-- them, so the late ones never wait for ever.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:drawn     HASH window, round, commit of the last draw
-- KEYS[3] wr:{item}:pool      ZSET tokenId scored by draw window
-- KEYS[4] wr:{item}:late      ZSET tokenId scored by offset
-- KEYS[5] wr:{item}:seq       STRING FIFO sequence
-- KEYS[6] wr:{item}:waiting   ZSET tokenId scored by seq
-- ARGV[1] partition  ARGV[2] offset of the draw record  ARGV[3] draw window
-- ARGV[4] round  ARGV[5] commit
-- Returns {outcome, n}: MORE with how many late ones were placed (call again;
-- at most 1000 a call); DRAWN with the last batch's count when the draw is
-- recorded; STALE (offset recorded, nothing placed) when a draw of this window
-- or a later one is done; REPLAY when the record was applied before; UNDRAWN
-- with how many of the window are still pooled (the chunks did not all run).
-- Every key is read before the first write; the offset is written last.
if replayed(KEYS[1], ARGV[1], ARGV[2]) then
  return {'REPLAY', 0}
end
local window = tonumber(ARGV[3])
if window <= tonumber(redis.call('HGET', KEYS[2], 'window') or '0') then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'STALE', 0}
end
local left = redis.call('ZCOUNT', KEYS[3], '-inf', window)
if left > 0 then
  return {'UNDRAWN', left}
end
local seq = tonumber(redis.call('GET', KEYS[5]) or '0')
if not seq or seq ~= math.floor(seq) then
  return redis.error_reply('ERR corrupt ' .. KEYS[5] .. ': not an integer')
end
redis.call('ZCARD', KEYS[6])
local moved = 0
local lateAfter = redis.call('HGET', KEYS[2], 'lateAfter') or '+inf'
if redis.call('ZCOUNT', KEYS[3], '-inf', lateAfter) == 0 then
  local late = redis.call('ZRANGE', KEYS[4], 0, 999)
  for _, tok in ipairs(late) do
    seq = redis.call('INCR', KEYS[5])
    redis.call('ZADD', KEYS[6], 'NX', seq, tok)
    redis.call('ZREM', KEYS[4], tok)
  end
  moved = #late
  if redis.call('ZCARD', KEYS[4]) > 0 then
    return {'MORE', moved}
  end
end
redis.call('HSET', KEYS[2], 'window', ARGV[3], 'round', ARGV[4], 'commit', ARGV[5])
redis.call('HDEL', KEYS[2], 'drawing')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'DRAWN', moved}
