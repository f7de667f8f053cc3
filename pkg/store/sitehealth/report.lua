-- report: keep one instance's latest health report of an item's site.
-- KEYS[1] wr:{item}:signal  HASH instance -> report JSON (at most ARGV[3] instances)
-- ARGV[1] instance  ARGV[2] report JSON  ARGV[3] most instances  ARGV[4] key TTL (s)
-- Returns 1 when stored, 0 when a new instance would pass the bound.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
