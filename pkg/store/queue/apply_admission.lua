-- apply_admission: replay one event of waitroom.admissions on a rebuild: the
-- admissions promote.lua decided are written again, by the same function
-- (the prelude's admit), with their recorded expiries, at the point of the
-- record they were decided at (the rebuild applies the event right after the
-- registrations its applied offsets name). Admissions that expired by the
-- event's time are dropped first, as that tick's promote did.
-- KEYS[1] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[2] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[3] wr:{item}:head      STRING highest FIFO seq admitted so far
-- KEYS[4] wr:{item}:paced     LIST "ms:n": admissions by tick
-- KEYS[5] wr:{item}:express   ZSET bypass places, each also in waiting
-- KEYS[6] wr:{item}:pace      HASH sum60: admitted in the pace window
-- KEYS[7] wr:{item}:state     HASH sessionTTLSeconds: for events without expiries
-- KEYS[8] wr:{item}:changes   STRING changes of the line (the prelude's changed)
-- ARGV[1] the event's time (ms)  ARGV[2..] tokenId, expiry (ms) pairs in admission order
--   (expiry 0: an event written before expiries were on it; the event's time plus the
--   item's session TTL, as promote.lua set it)
-- Returns {'ADMITTED', n, ''}: n of the event's tokens were waiting and are
-- admitted now. A token that is not waiting (republished: admitted before;
-- or it left) is skipped, as promote never admits it twice.
local now = tonumber(ARGV[1])
local head = tonumber(redis.call('GET', KEYS[3]) or '0')
if not head then
  return redis.error_reply('ERR corrupt ' .. KEYS[3] .. ': not a number')
end
local sum60 = tonumber(redis.call('HGET', KEYS[6], 'sum60') or '0')
if not sum60 then
  return redis.error_reply('ERR corrupt ' .. KEYS[6] .. ': sum60 is not a number')
end
redis.call('ZCARD', KEYS[2]) -- type-checks the admitted set
redis.call('LLEN', KEYS[4])
local ttl = tonumber(redis.call('HGET', KEYS[7], 'sessionTTLSeconds') or '0') or 0
if ttl <= 0 then ttl = 300 end
local function expiry(e)
  if e == '0' then return now + ttl * 1000 end
  return e
end
local express, fifo, exps, fexps = {}, {}, {}, {}
local moved = false
for i = 2, #ARGV - 1, 2 do
  local tok = ARGV[i]
  local seq = redis.call('ZSCORE', KEYS[1], tok)
  if seq then
    if redis.call('ZSCORE', KEYS[5], tok) then
      express[#express + 1], exps[#exps + 1] = tok, expiry(ARGV[i + 1])
    else
      fifo[#fifo + 1], fexps[#fexps + 1] = tok, expiry(ARGV[i + 1])
      if tonumber(seq) > head then head, moved = tonumber(seq), true end
    end
  end
end
local nx = #express
for i = 1, #fifo do
  express[nx + i], exps[nx + i] = fifo[i], fexps[i]
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if #express > 0 then
  if not moved then head = nil end
  admit({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8]}, express, nx, exps, head, now)
  redis.call('HSET', KEYS[6], 'sum60', sum60 + #express)
end
return {'ADMITTED', #express, ''}
