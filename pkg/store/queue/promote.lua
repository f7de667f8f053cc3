-- promote: one scheduler tick for one item, or one slice of a big tick,
-- atomically: refuse a stale leader, drop expired admissions, then admit
-- min(rate budget, maxActive - active, limit) people from the front of the line.
-- Bypass codes' places (express) go first, whatever the rate budget and
-- maxActive (still not while paused, disabled or sold out), and do not move
-- the head: the head is the highest FIFO seq admitted, which positions are
-- computed from. They are admitted and published like everyone else.
-- KEYS[1] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[2] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[3] wr:{item}:head      STRING highest seq admitted so far
-- KEYS[4] wr:{item}:epoch     STRING highest leader epoch seen (the fence)
-- KEYS[5] wr:{item}:state     HASH item state and admission policy (paused: nobody admitted; steer set:
--                              never above maxRate;
--                              mode passthrough: everyone waiting, whatever the rate and maxActive)
-- KEYS[6] wr:{item}:pace      HASH tokens (rate budget), last (ms), sum60 (admitted in the last minute);
--                              steerRate and steerHead, the steering controller's effective target
--                              (steer.lua), when one applies: admit at most that fast, and nobody from
--                              the line past seq steerHead (an allowance: expiries free no room)
-- KEYS[7] wr:{item}:paced     LIST "ms:n", oldest first: admissions of the last minute
-- KEYS[8] wr:{item}:unpublished LIST admissions not yet on waitroom.admissions, one
--                              "tokenId<TAB>expiry<TAB>applied offsets" each (prelude's admit)
-- KEYS[9] wr:{item}:express   ZSET tokenId scored by seq: bypass places, each also in waiting
--                              (a member no longer waiting, e.g. it left, is dropped here)
-- KEYS[10] wr:{item}:applied  HASH partition -> highest applied registrations offset: the
--                              point of the record this tick's decision was taken at
-- KEYS[11] wr:{item}:drawn    HASH drawing: a draw half applied (nobody admitted from the line)
-- KEYS[12] wr:{item}:changes  STRING changes of the line (the prelude's changed): one a tick that admits
-- ARGV[1] epoch of the caller  ARGV[2] now (ms)  ARGV[3] burst (ms of rate the budget may hold)
-- ARGV[4] limit: the most this call admits  ARGV[5] page: the most unpublished entries returned
-- Returns {outcome, admitted, head, waiting, active, expired, {unpublished entries},
--          unpublished total, more}:
-- outcome OK, or FENCED (a newer leader has promoted this item: nothing was changed).
-- The unpublished list holds this call's admissions after any earlier ones whose
-- event was not acknowledged yet (see ack.lua): events are at least once. Only
-- its first `page` entries are returned; the total says how many there are.
-- more is 1 when `limit` cut this call short while the budget and the line held
-- more: call again with the same now for the next slice. Each slice is atomic on
-- its own and charges the budget for what it admitted.
--
-- This script decides; the write of the admissions is the prelude's admit,
-- which apply_admission.lua runs too when a rebuild replays the decision.
-- Every key is read (and so type-checked) before the first write, so the
-- script cannot fail half-way; the admitted people are moved in chunks, so
-- no call builds a Lua stack from an unbounded list.
local CHUNK = 1000
local epoch, now, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local limit, page = tonumber(ARGV[4]), tonumber(ARGV[5])

-- Reads.
local seen = tonumber(redis.call('GET', KEYS[4]) or '0')
if not seen then
  return redis.error_reply('ERR corrupt ' .. KEYS[4] .. ': not a number')
end
if epoch < seen then
  return {'FENCED', 0, 0, 0, 0, 0, {}, 0, 0}
end
local waiting = redis.call('ZCARD', KEYS[1])
local active = redis.call('ZCARD', KEYS[2])
local unpublished = redis.call('LLEN', KEYS[8])
local head = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local pace = redis.call('HMGET', KEYS[6], 'tokens', 'last', 'sum60', 'steerRate', 'steerHead')
local tokens = tonumber(pace[1] or '0') or 0
local last = tonumber(pace[2] or '0') or 0
local sum60 = tonumber(pace[3] or '0') or 0
local steerRate = tonumber(pace[4] or '') -- nil: no effective target applies
local steerHead = tonumber(pace[5] or '')
local exCard = redis.call('ZCARD', KEYS[9])

-- An idle item (nobody waiting or admitted, nothing to publish, no recent
-- admissions) costs a few reads: most active items are idle most of the time.
if waiting == 0 and active == 0 and unpublished == 0 and sum60 == 0 then
  if epoch > seen then
    redis.call('SET', KEYS[4], epoch)
  end
  redis.call('HDEL', KEYS[6], 'last') -- the bucket refills: the next arrival goes at once
  if exCard > 0 then
    redis.call('DEL', KEYS[9]) -- nobody waits: every express member left
  end
  return {'OK', 0, head, 0, 0, 0, {}, 0, 0}
end

local st = redis.call('HMGET', KEYS[5], 'enabled', 'ratePerSecond', 'maxActive', 'sessionTTLSeconds', 'stock', 'paused', 'mode',
  'steer', 'maxRate')
local enabled = st[1] == 'true'
local rate = tonumber(st[2] or '0') or 0
if steerRate and steerRate < rate then rate = steerRate end -- the smaller of intent and effective target
if st[8] and st[8] ~= '' then
  -- A steered item never goes above maxRate, whatever applies (the controller's target,
  -- the static policy before the first signal or after a lost one, advice).
  local maxRate = tonumber(st[9] or '0') or 0
  if maxRate > 0 and maxRate < rate then rate = maxRate end
end
local maxActive = tonumber(st[3] or '0') or 0
local ttl = tonumber(st[4] or '0') or 0
if ttl <= 0 then ttl = 300 end
local stock = tonumber(st[5] or '-1') or -1
local paused = st[6] == 'true' -- admits nobody, keeps the rate for the resume
local passthrough = st[7] == 'passthrough' -- the room is off: everyone waiting goes in
local expired = redis.call('ZCOUNT', KEYS[2], '-inf', now)
local mark = appliedMark(KEYS[10]) -- read (and type-checked) before any write
local halfDrawn = drawing(KEYS[11], KEYS[10])

-- Rate budget: a token bucket refilled by elapsed time, holding at most
-- burst ms of rate and at least one person, so slow rates still admit; full
-- while nobody waits, so the room is invisible until load exceeds capacity.
local cap = math.max(rate * burst / 1000, 1)
if last == 0 or waiting == 0 then
  tokens = cap -- an idle room lets the next arrival in on the next tick
elseif now > last then
  tokens = tokens + rate * (now - last) / 1000
end
if tokens > cap then tokens = cap end
if rate <= 0 or paused then tokens = 0 end
if passthrough and not paused then tokens = waiting end

-- Admissions older than a minute leave the running sum (oldest first), at
-- most CHUNK entries a call: the reply read here stays bounded.
local drop
sum60, drop = prunePace(KEYS[7], now, sum60)

-- Express places: the first `limit` members, those still waiting go in.
local express, stale = {}, {}
local open = enabled and stock ~= 0 and not paused
if exCard > 0 and open then
  for _, tok in ipairs(redis.call('ZRANGE', KEYS[9], 0, limit - 1)) do
    if redis.call('ZSCORE', KEYS[1], tok) then
      express[#express + 1] = tok
    else
      stale[#stale + 1] = tok
    end
  end
end
local taken = #express + #stale

active = active - expired
local n = math.floor(tokens)
if not enabled or stock == 0 or halfDrawn then n = 0 end
if maxActive > 0 and not passthrough then n = math.min(n, maxActive - active - #express) end
if steerHead and not passthrough then n = math.min(n, steerHead - head) end
local more = 0
if open and exCard > taken then
  n, more = 0, 1 -- more express places than this slice takes: the next slice goes on
elseif n > limit - taken then
  n = limit - taken
  if waiting - #express > n then more = 1 end
end

-- Writes: nothing below can fail on a key's type or value.
if epoch > seen then
  redis.call('SET', KEYS[4], epoch)
end
if expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end
if drop > 0 then
  redis.call('LTRIM', KEYS[7], drop, -1)
end
local admitted = {}
for i = 1, #express do
  admitted[i] = express[i]
end
for i = 1, #stale do
  express[#express + 1] = stale[i] -- stale members leave the express set here; admit drops the rest
end
for lo = #admitted + 1, taken, CHUNK do
  redis.call('ZREM', KEYS[9], unpack(express, lo, math.min(lo + CHUNK - 1, taken)))
end
local fifo = 0
if n > 0 then
  -- The express places admitted above are still in the line (admit moves
  -- them below): the front read passes over them, so nobody is admitted twice.
  local skip = {}
  for i = 1, #admitted do
    skip[admitted[i]] = true
  end
  -- Members only: a score is formatted by Redis and parsed by Lua; the
  -- last one admitted gives the head.
  local front = redis.call('ZRANGE', KEYS[1], 0, n + #admitted - 1)
  for i = 1, #front do
    if fifo == n then break end
    if not skip[front[i]] then
      admitted[#admitted + 1] = front[i]
      fifo = fifo + 1
    end
  end
  if fifo > 0 then
    head = tonumber(redis.call('ZSCORE', KEYS[1], admitted[#admitted]))
  end
end
-- The page returned: the list's first entries. When it was empty, they are
-- this call's admissions, as admit pushed them (no LRANGE to read them back).
local first = {}
if #admitted > 0 then
  local newHead = nil
  if fifo > 0 then newHead = head end
  local keep = 0
  if unpublished == 0 then keep = page end
  first = admit({KEYS[1], KEYS[2], KEYS[3], KEYS[7], KEYS[9], KEYS[12]}, admitted, taken - #stale, now + ttl * 1000, newHead,
    now, KEYS[8], mark, true, keep)
  tokens = tokens - fifo -- express places are not charged to the rate budget
  sum60 = sum60 + #admitted
end
redis.call('HSET', KEYS[6], 'tokens', tostring(tokens), 'last', now, 'sum60', sum60)
if page > 0 and unpublished > 0 then
  first = redis.call('LRANGE', KEYS[8], 0, page - 1)
end
return {'OK', #admitted, head, waiting - #admitted, active + #admitted, expired, first,
  unpublished + #admitted, more}
