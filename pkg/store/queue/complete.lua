-- complete: the downstream service is done with an admission; its place is freed at once.
-- KEYS[1] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[2] wr:{item}:users     HASH place key -> tokenId ("!C"..tokenId once completed)
-- KEYS[3] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[4] wr:{item}:changes   STRING changes of the line (the prelude's changed): a
--                             completion moves no applied offset, seq or head
-- ARGV[1] tokenId  ARGV[2] place key
-- Returns 1 when the admission was live and is now completed, 0 otherwise.
-- Every key is read before the first write.
--
-- A completion and a leave of the same admitted token commute: the api
-- applies a completion at once, possibly before the consumer applies a leave
-- recorded before it (the leave then finds "!C" and changes nothing), while a
-- rebuild applies them in record order (the leave frees the admission and
-- marks "!L"). A completion is only ever recorded for a token the room
-- admitted (the api checks the live admission first), so here a left place
-- of this very token is marked completed too: both orders end "!C". So is
-- a place whose admission was dropped as expired before the record was
-- applied (a rebuild applies the admissions decided meanwhile first), unless
-- the token waits again (an admission lost with Redis before it was
-- published: the person was returned to their place).
local cur = redis.call('HGET', KEYS[2], ARGV[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if cur == '!L' .. ARGV[1] or cur == ARGV[1] and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    redis.call('HSET', KEYS[2], ARGV[2], '!C' .. ARGV[1])
    changed(KEYS[4])
  end
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
if cur == ARGV[1] then
  redis.call('HSET', KEYS[2], ARGV[2], '!C' .. ARGV[1])
end
changed(KEYS[4])
return 1
