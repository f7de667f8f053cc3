-- enqueue_bypass: apply one register record that carries a bypass code: like
-- enqueue, and the place is express (admitted at the next tick, whatever the
-- rate: see promote) while the code has uses left.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:users     HASH userId -> tokenId ("!L"/"!C" prefixed once ended)
-- KEYS[3] wr:{item}:seq       STRING FIFO sequence
-- KEYS[4] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[5] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[6] wr:{item}:express   ZSET tokenId scored by seq: waiting places of bypass codes
-- KEYS[7] wr:{item}:bypass    HASH code id -> uses so far
-- KEYS[8] wr:{item}:pool      ZSET pre-queued tokenIds (a place: a duplicate)
-- KEYS[9] wr:{item}:late      ZSET tokenIds queued behind a draw (a place: a duplicate)
-- ARGV[1] partition  ARGV[2] offset  ARGV[3] tokenId  ARGV[4] userId
-- ARGV[5] code id    ARGV[6] the code's count (0: the code had expired when the record was made)
-- Returns {outcome, seq, tokenId}: ADDED (a use counted; the token waits in
-- waiting and in express); DUPLICATE (the user holds a place: no use counted);
-- EXHAUSTED (no use left: applied, never placed, status REJECTED); REPLAY.
-- Every key is read (and so type-checked) before the first write, and the
-- applied offset is written last. The replay guard and the dedupe are
-- enqueue.lua's, line for line (a script cannot call another): change both.
-- The rebuild's model (pkg/rebuild) replays the same rules.
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then
  return {'REPLAY', 0, ''}
end
local cur = redis.call('HGET', KEYS[2], ARGV[4])
local dup = nil
if cur and string.sub(cur, 1, 1) ~= '!' then
  local s = redis.call('ZSCORE', KEYS[4], cur)
  if s then
    dup = {'DUPLICATE', tonumber(s), cur}
  else
    local exp = redis.call('ZSCORE', KEYS[5], cur)
    if exp then
      local t = redis.call('TIME')
      if tonumber(exp) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
        dup = {'DUPLICATE', 0, cur}
      end
    end
  end
end
if not dup and cur and string.sub(cur, 1, 1) ~= '!' and
    (redis.call('ZSCORE', KEYS[8], cur) or redis.call('ZSCORE', KEYS[9], cur)) then
  dup = {'DUPLICATE', 0, cur}
end
if not dup and (redis.call('ZSCORE', KEYS[4], ARGV[3]) or redis.call('ZSCORE', KEYS[8], ARGV[3]) or
    redis.call('ZSCORE', KEYS[9], ARGV[3])) then
  dup = {'DUPLICATE', 0, ARGV[3]}
end
redis.call('ZSCORE', KEYS[5], ARGV[3]) -- type-checks the admitted set
redis.call('ZSCORE', KEYS[6], ARGV[3]) -- and the express set
local uses = tonumber(redis.call('HGET', KEYS[7], ARGV[5]) or '0')
if not uses then
  return redis.error_reply('ERR corrupt ' .. KEYS[7] .. ': uses of ' .. ARGV[5] .. ' not a number')
end
if dup then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return dup
end
if uses >= tonumber(ARGV[6]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'EXHAUSTED', 0, ''}
end
local seq = tonumber(redis.call('GET', KEYS[3]) or '0')
if not seq or seq ~= math.floor(seq) then
  return redis.error_reply('ERR corrupt ' .. KEYS[3] .. ': not an integer')
end
seq = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[4], 'NX', seq, ARGV[3])
redis.call('ZADD', KEYS[6], 'NX', seq, ARGV[3])
redis.call('HINCRBY', KEYS[7], ARGV[5], 1)
redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'ADDED', seq, ARGV[3]}
