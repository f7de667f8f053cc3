-- rewind: move an item's applied offset on a partition back to just before
-- `from`, so the ops from `from` on can run again (the consumer's bounded
-- retries of records Redis refused). Only when the stored offset is one the
-- caller's batch could have written (from <= stored <= upTo): a newer write wins.
-- KEYS[1] wr:{item}:applied  HASH partition -> highest applied offset
-- ARGV[1] partition  ARGV[2] from  ARGV[3] upTo  ARGV[4] from - 1 (as written)
-- Returns 1 when the ops may run again (rewound, or nothing applied from `from` on),
-- 0 when a write beyond upTo owns the offset.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return 1
end
cur = tonumber(cur)
if not cur or cur > tonumber(ARGV[3]) then
  return 0 -- corrupt, or a newer write owns it
end
if cur >= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
end
return 1
