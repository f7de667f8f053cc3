-- status: where a queue token stands, read-only (safe on replicas).
-- KEYS[1] wr:{item}:users     HASH place key -> tokenId ("!L"..tokenId once the place was
--                             left, "!C"..tokenId once the admission was completed); the key
--                             is the tokenId itself, or a userId a site-signed assertion proved
-- KEYS[2] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[3] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[4] wr:{item}:applied   HASH partition -> highest applied offset
-- KEYS[5] wr:{item}:pace      HASH admission pace (sum60: admitted in the last minute)
-- KEYS[6] wr:{item}:paced     LIST "ms:n", oldest first: admissions of the last minute
-- KEYS[7] wr:{item}:head      STRING highest seq admitted so far
-- KEYS[8] wr:{item}:express   ZSET waiting places of bypass codes (admitted at the next tick)
-- KEYS[9] wr:{item}:pool      ZSET pre-queued tokenIds scored by draw window
-- KEYS[10] wr:{item}:late     ZSET tokenIds queued behind a pending draw
-- KEYS[11] wr:{item}:unpublished LIST admissions not on waitroom.admissions yet,
--                             "tokenId<TAB>expiry<TAB>offsets" each (prelude's admit)
-- ARGV[1] place key  ARGV[2] partition  ARGV[3] offset (of the token's record)
-- ARGV[4] tokenId ('': whichever token holds the key, for operators and tests)
-- Only the place of ARGV[4] is ever answered: another token of the same key
-- (a proven user's repeat registration) reads DUPLICATE, with the live token
-- that holds the key's place (or '' when that place has ended), never its place.
-- Returns {state, a, b, tokenId}:
--   WAITING  a=position (1-based) b=waitingTotal  tokenId=the token (only these
--            three for a bypass code's place: position 1, read exactly each time), then sum60,
--            the admitted count (active), the oldest "ms:n" of the pace (or false),
--            the token's seq and the item's head (all read at once: the api
--            answers later reads from memory by how far the head moved)
--   ADMITTED a=expiry ms (may be past: expired)   tokenId=the token; only once the
--            admission is on waitroom.admissions (Kafka is the record): until the
--            scheduler's publish is acknowledged (ack.lua) it reads WAITING at
--            position 1 in the short form, b=waitingTotal + the unpublished count
--   POOLED   a=the draw's window (unix ms) b=how many are in that draw  tokenId=the token
--   LATE     a=the pending draw's window  b=how many are in it  tokenId=the token
--   DUPLICATE (applied, but another token holds the key's place: tokenId names it if live),
--   PENDING (record not applied yet), LEFT (the place was left), ABANDONED (released idle,
--   "!A"..tokenId in users), COMPLETED (the admission
--   was used), GONE (the admission expired), REJECTED (applied, never placed)
local tok = ARGV[4]
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if tok == '' and cur then
  tok = string.sub(cur, 1, 1) == '!' and string.sub(cur, 3) or cur
end
if cur == tok then
  local r = redis.call('ZRANK', KEYS[2], cur)
  if r and redis.call('ZSCORE', KEYS[8], cur) then
    return {'WAITING', 1, redis.call('ZCARD', KEYS[2]), cur}
  end
  if r then
    local sum60 = tonumber(redis.call('HGET', KEYS[5], 'sum60') or '0')
    return {'WAITING', r + 1, redis.call('ZCARD', KEYS[2]), cur, sum60, redis.call('ZCARD', KEYS[3]),
      redis.call('LINDEX', KEYS[6], 0), redis.call('ZSCORE', KEYS[2], cur),
      tonumber(redis.call('GET', KEYS[7]) or '0')}
  end
  local w = redis.call('ZSCORE', KEYS[9], cur)
  if w then
    return {'POOLED', tonumber(w), redis.call('ZCOUNT', KEYS[9], '-inf', w), cur}
  end
  if redis.call('ZSCORE', KEYS[10], cur) then
    local first = redis.call('ZRANGE', KEYS[9], 0, 0, 'WITHSCORES')
    local fw = tonumber(first[2] or '0')
    return {'LATE', fw, redis.call('ZCOUNT', KEYS[9], '-inf', fw), cur}
  end
  local exp = redis.call('ZSCORE', KEYS[3], cur)
  if exp then
    -- Not told before it is published (unpublished.lua).
    local n = unpublished(KEYS[11], cur, exp)
    if n then
      return {'WAITING', 1, redis.call('ZCARD', KEYS[2]) + n, cur}
    end
    return {'ADMITTED', tonumber(exp), 0, cur}
  end
end
local applied = redis.call('HGET', KEYS[4], ARGV[2])
if not applied or tonumber(applied) < tonumber(ARGV[3]) then
  return {'PENDING', 0, 0, ''}
end
if cur == '!L' .. tok then
  return {'LEFT', 0, 0, tok}
end
if cur == '!A' .. tok then
  return {'ABANDONED', 0, 0, tok}
end
if cur == '!C' .. tok then
  return {'COMPLETED', 0, 0, tok}
end
if cur == tok then
  return {'GONE', 0, 0, tok}
end
if cur then
  if string.sub(cur, 1, 1) == '!' then
    return {'DUPLICATE', 0, 0, ''}
  end
  return {'DUPLICATE', 0, 0, cur}
end
return {'REJECTED', 0, 0, ''}
