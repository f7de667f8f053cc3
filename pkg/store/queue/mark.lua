-- mark: record that an offset was consumed without changing the line (a record
-- that went to the DLQ), so status reports it as handled rather than pending.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset
-- KEYS[2] wr:{item}:changes   STRING changes of the line (the prelude's changed)
-- ARGV[1] partition  ARGV[2] offset
-- Returns {outcome, 0, ''}: MARKED, or REPLAY when the offset was applied before.
if replayed(KEYS[1], ARGV[1], ARGV[2]) then
  return {'REPLAY', 0, ''}
end
changed(KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'MARKED', 0, ''}
