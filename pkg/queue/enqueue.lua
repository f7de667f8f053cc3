-- enqueue: apply one register record of waitroom.registrations to an item's line.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:users     HASH userId -> tokenId ("!L"..tokenId once the user left,
--                             "!C"..tokenId once the admission was completed)
-- KEYS[3] wr:{item}:seq       STRING FIFO sequence
-- KEYS[4] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[5] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- ARGV[1] partition  ARGV[2] offset  ARGV[3] tokenId  ARGV[4] userId
-- Returns {outcome, seq, tokenId}: ADDED with the new seq; DUPLICATE with the live
-- tokenId of that user (waiting or admitted); REPLAY when the offset was applied before.
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then
  return {'REPLAY', 0, ''}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local cur = redis.call('HGET', KEYS[2], ARGV[4])
if cur and string.sub(cur, 1, 1) ~= '!' then
  local s = redis.call('ZSCORE', KEYS[4], cur)
  if s then
    return {'DUPLICATE', tonumber(s), cur}
  end
  local exp = redis.call('ZSCORE', KEYS[5], cur)
  if exp then
    local t = redis.call('TIME')
    if tonumber(exp) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
      return {'DUPLICATE', 0, cur}
    end
  end
end
if redis.call('ZSCORE', KEYS[4], ARGV[3]) then
  return {'DUPLICATE', 0, ARGV[3]}
end
local seq = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[4], 'NX', seq, ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
return {'ADDED', seq, ARGV[3]}
