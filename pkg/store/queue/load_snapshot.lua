-- load_snapshot: write one chunk of a snapshot of an item's line into its
-- emptied keys, on a rebuild: each place as linesnap shows it (state, token,
-- place key, number), or the line's counters and small keys (the head).
-- KEYS[1] wr:{item}:users    KEYS[2] wr:{item}:waiting  KEYS[3] wr:{item}:admitted
-- KEYS[4] wr:{item}:pool     KEYS[5] wr:{item}:late     KEYS[6] wr:{item}:express
-- KEYS[7] wr:{item}:seq      KEYS[8] wr:{item}:head     KEYS[9] wr:{item}:applied
-- KEYS[10] wr:{item}:drawn   KEYS[11] wr:{item}:bypass  KEYS[12] wr:{item}:stats
-- KEYS[13] wr:{item}:paced
-- ARGV[1] 'places': ARGV[2..] per place: state, tokenId, place key ("": none), number
--   (WAITING: seq; ADMITTED: expiry ms; POOLED: window; LATE: its offset; else 0)
-- ARGV[1] 'head': ARGV[2] seq, ARGV[3] head, ARGV[4..] counts n of applied, drawn,
--   bypass, stats (field/value pairs), express (tokenId/seq pairs), paced (values),
--   each followed by its values
-- Returns the number of places (or fields) written. Every argument is checked
-- and every key read (type-checked) before the first write, and each write
-- command takes at most 1000 members: a chunk loads whole or not at all.
local CHUNK = 1000
for _, k in ipairs({KEYS[1], KEYS[9], KEYS[10], KEYS[11], KEYS[12]}) do redis.call('HLEN', k) end
for i = 2, 6 do redis.call('ZCARD', KEYS[i]) end
redis.call('LLEN', KEYS[13])
redis.call('GET', KEYS[7])
redis.call('GET', KEYS[8])

local function num(v, what)
  local n = tonumber(v)
  if not n then error('load_snapshot: ' .. what .. ' ' .. tostring(v) .. ' is not a number') end
  return n
end

-- hset and zadd write flat pairs in commands of at most CHUNK pairs.
local function hset(key, kv)
  for lo = 1, #kv, 2 * CHUNK do
    redis.call('HSET', key, unpack(kv, lo, math.min(lo + 2 * CHUNK - 1, #kv)))
  end
end
local function zadd(key, sm)
  for lo = 1, #sm, 2 * CHUNK do
    redis.call('ZADD', key, unpack(sm, lo, math.min(lo + 2 * CHUNK - 1, #sm)))
  end
end

if ARGV[1] == 'places' then
  local sets = {WAITING = 2, ADMITTED = 3, POOLED = 4, LATE = 5}
  local users, z = {}, {{}, {}, {}, {}, {}}
  local n = 0
  for i = 2, #ARGV - 3, 4 do
    local st, tok, user, v = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local set, ended = sets[st], ENDED[st]
    if not set and not ended and st ~= 'GONE' then
      return redis.error_reply('ERR load_snapshot: unknown state ' .. st .. ' of ' .. tok)
    end
    if set then
      local s = z[set]
      s[#s + 1] = num(v, 'number of ' .. tok)
      s[#s + 1] = tok
    end
    if user ~= '' then
      users[#users + 1] = user
      users[#users + 1] = (ended or '') .. tok
    end
    n = n + 1
  end
  hset(KEYS[1], users)
  for set = 2, 5 do zadd(KEYS[set], z[set]) end
  return n
end

if ARGV[1] ~= 'head' then
  return redis.error_reply('ERR load_snapshot: unknown part ' .. tostring(ARGV[1]))
end
local seq, head = num(ARGV[2], 'seq'), num(ARGV[3], 'head')
-- applied, drawn, bypass, stats, express, paced: each a count then its values.
local parts, at = {}, 4
for p = 1, 6 do
  local cnt = num(ARGV[at], 'count')
  if at + cnt > #ARGV then return redis.error_reply('ERR load_snapshot: head cut short') end
  local vs = {}
  for i = at + 1, at + cnt do vs[#vs + 1] = ARGV[i] end
  parts[p] = vs
  at = at + cnt + 1
end
for i = 1, #parts[1], 2 do num(parts[1][i + 1], 'applied offset') end
local express = {}
for i = 1, #parts[5], 2 do
  express[#express + 1] = num(parts[5][i + 1], 'express seq')
  express[#express + 1] = parts[5][i]
end
if seq > 0 then redis.call('SET', KEYS[7], seq) end
if head > 0 then redis.call('SET', KEYS[8], head) end
local n = 0
for p, key in ipairs({KEYS[9], KEYS[10], KEYS[11], KEYS[12]}) do
  hset(key, parts[p])
  n = n + #parts[p] / 2
end
zadd(KEYS[6], express)
for lo = 1, #parts[6], CHUNK do
  redis.call('RPUSH', KEYS[13], unpack(parts[6], lo, math.min(lo + CHUNK - 1, #parts[6])))
end
return n + #express / 2 + #parts[6]
