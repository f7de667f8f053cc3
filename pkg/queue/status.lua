-- status: where a queue token stands, read-only (safe on replicas).
-- KEYS[1] wr:{item}:users     HASH userId -> tokenId ("L:"..tokenId once the user left)
-- KEYS[2] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[3] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[4] wr:{item}:applied   HASH partition -> highest applied offset
-- ARGV[1] userId  ARGV[2] partition  ARGV[3] offset (of the token's record)
-- Returns {state, a, b, tokenId}:
--   WAITING  a=position (1-based) b=waitingTotal  tokenId=the user's live token
--   ADMITTED a=expiry ms (may be past: expired)   tokenId=the user's live token
--   PENDING (record not applied yet), LEFT (the user left), GONE (the user's place
--   ended: admission expired or completed), REJECTED (applied, never placed)
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and string.sub(cur, 1, 2) ~= 'L:' then
  local r = redis.call('ZRANK', KEYS[2], cur)
  if r then
    return {'WAITING', r + 1, redis.call('ZCARD', KEYS[2]), cur}
  end
  local exp = redis.call('ZSCORE', KEYS[3], cur)
  if exp then
    return {'ADMITTED', tonumber(exp), 0, cur}
  end
end
local applied = redis.call('HGET', KEYS[4], ARGV[2])
if not applied or tonumber(applied) < tonumber(ARGV[3]) then
  return {'PENDING', 0, 0, ''}
end
if cur and string.sub(cur, 1, 2) == 'L:' then
  return {'LEFT', 0, 0, string.sub(cur, 3)}
end
if cur then
  return {'GONE', 0, 0, cur}
end
return {'REJECTED', 0, 0, ''}
