-- ack: the admission event carrying the first n unpublished admissions is on
-- waitroom.admissions: forget them. Fenced like promote, so a paused ex-leader
-- cannot drop what a newer leader has not published yet.
-- KEYS[1] wr:{item}:epoch        STRING highest leader epoch seen
-- KEYS[2] wr:{item}:unpublished  LIST admissions not yet published (see promote.lua)
-- ARGV[1] epoch of the caller  ARGV[2] n
-- Returns 1, or 0 when fenced.
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then
  return 0
end
redis.call('LTRIM', KEYS[2], tonumber(ARGV[2]), -1)
return 1
