#!lua flags=allow-oom
-- advance: the view applied a topic-partition up to ARGV[2] - 1.
-- KEYS[1] wr:{view}          HASH the marker (nothing is written while it is missing);
--                            its field writes counts the advances, so a watcher that saw
--                            a higher count knows a lower one is a rolled-back Redis
-- KEYS[2] wr:{view}:applied  HASH "topic/partition" -> next offset not applied
-- ARGV[1] "topic/partition"  ARGV[2] next offset
-- Returns 1 when moved forward, 0 otherwise.
-- allow-oom: a full Redis (maxmemory) still takes it. It grows nothing but two
-- existing hashes by a field at most, and refused it left the marker behind
-- records already on Kafka: every watcher then took the view for a rolled-back
-- Redis and it was rebuilt from the whole record (40 s without admissions in a
-- seeded nemesis run) for a memory spike of seconds.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '-1')
if tonumber(ARGV[2]) <= cur then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'writes', 1)
return 1
