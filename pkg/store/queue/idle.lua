-- idle: the places of an item idle since a cutoff, read-only (the scheduler's
-- sweep; it publishes an abandon record for each, then forgets them).
-- KEYS[1] wr:{item}:seen     ZSET "tokenId placeKey" scored by last sign of life (ms)
-- KEYS[2] wr:{item}:waiting  ZSET tokenId scored by seq
-- KEYS[3] wr:{item}:pool     ZSET pre-queued tokenIds
-- KEYS[4] wr:{item}:late     ZSET tokenIds placed behind a draw
-- ARGV[1] cutoff (ms, inclusive)  ARGV[2] limit (at most 1000)
-- Returns {idle, gone}: members still waiting (in pool or late too) and
-- members no longer waiting (admitted, left, abandoned: only to forget), at
-- most limit in all, oldest first.
local ms = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local idle, gone = {}, {}
for _, m in ipairs(ms) do
  local sp = string.find(m, ' ', 1, true)
  local tok = sp and string.sub(m, 1, sp - 1) or m
  if waits(tok, KEYS[2], KEYS[3], KEYS[4]) then
    idle[#idle + 1] = m
  else
    gone[#gone + 1] = m
  end
end
return {idle, gone}
