-- complete: the downstream service is done with an admission; its place is freed at once.
-- KEYS[1] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[2] wr:{item}:users     HASH userId -> tokenId ("!C"..tokenId once completed)
-- ARGV[1] tokenId  ARGV[2] userId
-- Returns 1 when the admission was live and is now completed, 0 otherwise.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 and redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
  redis.call('HSET', KEYS[2], ARGV[2], '!C' .. ARGV[1])
end
return removed
