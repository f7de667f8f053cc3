-- promote: one scheduler tick for one item, atomically: refuse a stale leader,
-- drop expired admissions, then admit min(rate budget, maxActive - active)
-- people from the front of the line.
-- KEYS[1] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[2] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[3] wr:{item}:head      STRING highest seq admitted so far
-- KEYS[4] wr:{item}:epoch     STRING highest leader epoch seen (the fence)
-- KEYS[5] wr:{item}:state     HASH item state and admission policy
-- KEYS[6] wr:{item}:pace      HASH tokens (rate budget), last (ms), sum60 (admitted in the last minute)
-- KEYS[7] wr:{item}:paced     LIST "ms:n", oldest first: admissions of the last minute
-- KEYS[8] wr:{item}:unpublished LIST tokenIds admitted but not yet on waitroom.admissions
-- ARGV[1] epoch of the caller  ARGV[2] now (ms)  ARGV[3] burst (ms of rate the budget may hold)
-- Returns {outcome, admitted, head, waiting, active, expired, {unpublished tokenIds}}:
-- outcome OK, or FENCED (a newer leader has promoted this item: nothing was changed).
-- The unpublished list holds this tick's admissions after any earlier ones whose
-- event was not acknowledged yet (see ack.lua): events are at least once.
local epoch, now, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local seen = tonumber(redis.call('GET', KEYS[4]) or '0')
if epoch < seen then
  return {'FENCED', 0, 0, 0, 0, 0, {}}
end
if epoch > seen then
  redis.call('SET', KEYS[4], epoch)
end

-- An idle item (nobody waiting or admitted, nothing to publish, no recent
-- admissions) costs a few reads: most active items are idle most of the time.
local waiting = redis.call('ZCARD', KEYS[1])
if waiting == 0 and redis.call('ZCARD', KEYS[2]) == 0 and redis.call('LLEN', KEYS[8]) == 0
    and tonumber(redis.call('HGET', KEYS[6], 'sum60') or '0') == 0 then
  redis.call('HDEL', KEYS[6], 'last') -- the bucket refills: the next arrival goes at once
  return {'OK', 0, tonumber(redis.call('GET', KEYS[3]) or '0'), 0, 0, 0, {}}
end

local expired = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local st = redis.call('HMGET', KEYS[5], 'enabled', 'ratePerSecond', 'maxActive', 'sessionTTLSeconds', 'stock')
local enabled = st[1] == 'true'
local rate = tonumber(st[2] or '0') or 0
local maxActive = tonumber(st[3] or '0') or 0
local ttl = tonumber(st[4] or '0') or 0
if ttl <= 0 then ttl = 300 end
local stock = tonumber(st[5] or '-1') or -1

-- Rate budget: a token bucket refilled by elapsed time, holding at most
-- burst ms of rate and at least one person, so slow rates still admit; full
-- while nobody waits, so the room is invisible until load exceeds capacity.
local pace = redis.call('HMGET', KEYS[6], 'tokens', 'last', 'sum60')
local tokens = tonumber(pace[1] or '0') or 0
local last = tonumber(pace[2] or '0') or 0
local sum60 = tonumber(pace[3] or '0') or 0
local cap = math.max(rate * burst / 1000, 1)
if last == 0 or waiting == 0 then
  tokens = cap -- an idle room lets the next arrival in on the next tick
elseif now > last then
  tokens = tokens + rate * (now - last) / 1000
end
if tokens > cap then tokens = cap end
if rate <= 0 then tokens = 0 end

-- Forget admissions older than a minute from the running sum (oldest first).
while true do
  local oldest = redis.call('LINDEX', KEYS[7], 0)
  if not oldest then break end
  local ms, n = string.match(oldest, '^(%d+):(%d+)$')
  if tonumber(ms) > now - 60000 then break end
  sum60 = sum60 - tonumber(n)
  redis.call('LPOP', KEYS[7])
end

local active = redis.call('ZCARD', KEYS[2])
local n = math.floor(tokens)
if not enabled or stock == 0 then n = 0 end
if maxActive > 0 then n = math.min(n, maxActive - active) end
local admitted = {}
local head = tonumber(redis.call('GET', KEYS[3]) or '0')
if n > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], n)
  local exp = now + ttl * 1000
  for i = 1, #popped, 2 do
    admitted[#admitted + 1] = popped[i]
    redis.call('ZADD', KEYS[2], exp, popped[i])
    head = tonumber(popped[i + 1])
  end
  if #admitted > 0 then
    redis.call('SET', KEYS[3], head)
    redis.call('RPUSH', KEYS[8], unpack(admitted))
    tokens = tokens - #admitted
    sum60 = sum60 + #admitted
    redis.call('RPUSH', KEYS[7], now .. ':' .. #admitted)
  end
end
redis.call('HSET', KEYS[6], 'tokens', tostring(tokens), 'last', now, 'sum60', sum60)
return {'OK', #admitted, head, waiting - #admitted, active + #admitted, expired, redis.call('LRANGE', KEYS[8], 0, -1)}
