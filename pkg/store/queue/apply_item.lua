-- apply_item: store an item's state when its version is newer than the stored one.
-- KEYS[1] wr:{item}:state  HASH item state and admission policy
-- KEYS[2] wr:{item}:changes  STRING changes of the line (the prelude's changed): a state
--                           lost with a node (a pause, a policy) moves nothing else the
--                           view's watcher reads
-- ARGV[1] version, ARGV[2..] field/value pairs of the state
-- Returns 1 when applied, 0 when the stored version is the same or newer.
-- ARGV is bounded: Line.ApplyItem passes the version and at most thirty pairs, so the
-- unpack below stays far under Lua's stack limit.
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if tonumber(ARGV[1]) <= cur then
  return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], unpack(ARGV, 2))
changed(KEYS[2])
return 1
