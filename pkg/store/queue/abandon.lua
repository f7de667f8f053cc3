-- abandon: apply one abandon record of waitroom.registrations (the scheduler's
-- idle sweep): a waiting place whose holder neither polled nor held a stream
-- for the item's idleTimeout is released.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:users     HASH place key -> tokenId ("!A"..tokenId once abandoned)
-- KEYS[3] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[4] wr:{item}:pool      ZSET pre-queued tokenIds (not drawn yet)
-- KEYS[5] wr:{item}:late      ZSET tokenIds placed behind a draw
-- KEYS[6] wr:{item}:stats     HASH counters (abandoned: places released idle)
-- KEYS[7] wr:{item}:changes   STRING changes of the line (the prelude's changed)
-- ARGV[1] partition  ARGV[2] offset  ARGV[3] tokenId  ARGV[4] place key
-- Returns {outcome, 0, tokenId}: ABANDONED with the tokenId released; NOT_IN_LINE
-- when the token is not the user's waiting place any more (admitted, left,
-- replaced: the sweep raced it); REPLAY when the offset was applied before.
-- Unlike a leave, an admitted token keeps its admission. Every key is read
-- (and so type-checked) before the first write, and the applied offset is
-- written last.
if replayed(KEYS[1], ARGV[1], ARGV[2]) then
  return {'REPLAY', 0, ''}
end
local cur = redis.call('HGET', KEYS[2], ARGV[4])
redis.call('ZSCORE', KEYS[4], ARGV[3]) -- type-check every set before writing
redis.call('ZSCORE', KEYS[5], ARGV[3])
local waiting = waits(ARGV[3], KEYS[3], KEYS[4], KEYS[5])
local n = redis.call('HGET', KEYS[6], 'abandoned')
if not counter(n) then
  return redis.error_reply('ERR corrupt ' .. KEYS[6] .. ': abandoned is not an integer')
end
if cur ~= ARGV[3] or not waiting then
  changed(KEYS[7])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'NOT_IN_LINE', 0, ''}
end
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], '!A' .. ARGV[3])
redis.call('HINCRBY', KEYS[6], 'abandoned', 1)
changed(KEYS[7])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'ABANDONED', 0, ARGV[3]}
