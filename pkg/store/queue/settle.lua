-- settle: end a rebuild's replay of one item as its next live tick would find
-- it at now: admissions expired by now dropped (promote's ZREMRANGEBYSCORE),
-- the pace window pruned to the last minute with its sum, the rate budget
-- empty (a rebuild releases no burst), express members no longer waiting
-- dropped, and the epoch fence set.
-- KEYS[1] wr:{item}:waiting  KEYS[2] wr:{item}:admitted  KEYS[3] wr:{item}:paced
-- KEYS[4] wr:{item}:pace     KEYS[5] wr:{item}:express   KEYS[6] wr:{item}:epoch
-- ARGV[1] now (ms)  ARGV[2] the epoch fence
-- Returns {waiting, admitted}: the sizes of the line and the admitted set.
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local total = 0
for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local _, cnt = string.match(e, '^(%d+):(%d+)$')
  if cnt then total = total + tonumber(cnt) end
end
local sum60, drop = prunePace(KEYS[3], now, total)
while drop > 0 do
  redis.call('LTRIM', KEYS[3], drop, -1)
  sum60, drop = prunePace(KEYS[3], now, sum60)
end
for _, tok in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  if not redis.call('ZSCORE', KEYS[1], tok) then
    redis.call('ZREM', KEYS[5], tok)
  end
end
local waiting, admitted = redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])
if sum60 > 0 or waiting > 0 or admitted > 0 or redis.call('LLEN', KEYS[3]) > 0 then
  redis.call('HSET', KEYS[4], 'tokens', '0', 'last', now, 'sum60', sum60)
end
redis.call('SET', KEYS[6], ARGV[2])
return {waiting, admitted}
