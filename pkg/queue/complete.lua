-- complete: the downstream service is done with an admission; its place is freed at once.
-- KEYS[1] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[2] wr:{item}:users     HASH place key -> tokenId ("!C"..tokenId once completed)
-- ARGV[1] tokenId  ARGV[2] place key
-- Returns 1 when the admission was live and is now completed, 0 otherwise.
-- Both keys are read before the first write.
local cur = redis.call('HGET', KEYS[2], ARGV[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if cur == ARGV[1] then
  redis.call('HSET', KEYS[2], ARGV[2], '!C' .. ARGV[1])
end
return 1
