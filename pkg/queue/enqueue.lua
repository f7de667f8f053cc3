-- enqueue: apply one register record of waitroom.registrations to an item's line.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:users     HASH userId -> tokenId ("!L"..tokenId once the user left,
--                             "!C"..tokenId once the admission was completed)
-- KEYS[3] wr:{item}:seq       STRING FIFO sequence
-- KEYS[4] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[5] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[6] wr:{item}:pool      ZSET tokenId scored by draw window (pre-queued, not drawn yet)
-- KEYS[7] wr:{item}:late      ZSET tokenId scored by offset (placed after the pending draw)
-- KEYS[8] wr:{item}:drawn     HASH window, round, commit of the last draw; lateAfter: the
--                             highest pooled window when the late set last began
-- KEYS[9] wr:{item}:express   ZSET tokenId scored by seq: waiting places of bypass codes
-- KEYS[10] wr:{item}:bypass   HASH bypass code id -> uses so far
-- ARGV[1] partition  ARGV[2] offset  ARGV[3] tokenId  ARGV[4] userId
-- ARGV[5] draw window of the register (unix ms; 0: first come, first served)
-- ARGV[6] bypass code id ("": none)  ARGV[7] the code's count (0: it had expired
--         when the record was made)
-- Returns {outcome, seq, tokenId}: ADDED with the new seq; DUPLICATE with the live
-- tokenId of that user (waiting, pooled, late or admitted); REPLAY when the offset
-- was applied before; POOLED with the window when the register waits for its
-- window's draw (window above the last drawn one); LATE with the offset when it
-- must queue behind a pending draw (no window while the pool holds people, or
-- others are late already); with a bypass code, ADDED with the place also in
-- express (admitted at the next tick, past any pending draw: see promote.lua)
-- and the use counted, or EXHAUSTED (no use left: applied, never placed, status
-- REJECTED); a user already holding a place keeps it and uses nothing.
-- Every key is read (and so type-checked) before the first write, and the
-- applied offset is written last: a refused record leaves nothing behind.
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then
  return {'REPLAY', 0, ''}
end
local cur = redis.call('HGET', KEYS[2], ARGV[4])
local dup = nil
if cur and string.sub(cur, 1, 1) ~= '!' then
  local s = redis.call('ZSCORE', KEYS[4], cur)
  if s then
    dup = {'DUPLICATE', tonumber(s), cur}
  else
    local exp = redis.call('ZSCORE', KEYS[5], cur)
    if exp then
      local t = redis.call('TIME')
      if tonumber(exp) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
        dup = {'DUPLICATE', 0, cur}
      end
    end
  end
end
if not dup and cur and string.sub(cur, 1, 1) ~= '!' and
    (redis.call('ZSCORE', KEYS[6], cur) or redis.call('ZSCORE', KEYS[7], cur)) then
  dup = {'DUPLICATE', 0, cur}
end
if not dup and (redis.call('ZSCORE', KEYS[4], ARGV[3]) or redis.call('ZSCORE', KEYS[6], ARGV[3]) or
    redis.call('ZSCORE', KEYS[7], ARGV[3])) then
  dup = {'DUPLICATE', 0, ARGV[3]}
end
redis.call('ZSCORE', KEYS[5], ARGV[3]) -- type-checks the admitted set
local window = tonumber(ARGV[5] or '0') or 0
local drawn = tonumber(redis.call('HGET', KEYS[8], 'window') or '0') or 0
local code, uses = ARGV[6] or '', 0
if code ~= '' then
  redis.call('ZSCORE', KEYS[9], ARGV[3]) -- type-checks the express set
  uses = tonumber(redis.call('HGET', KEYS[10], code) or '0')
  if not uses then
    return redis.error_reply('ERR corrupt ' .. KEYS[10] .. ': uses of ' .. code .. ' not a number')
  end
end
if dup then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return dup
end
if code ~= '' and uses >= tonumber(ARGV[7]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'EXHAUSTED', 0, ''}
end
local seq = tonumber(redis.call('GET', KEYS[3]) or '0')
if not seq or seq ~= math.floor(seq) then
  return redis.error_reply('ERR corrupt ' .. KEYS[3] .. ': not an integer')
end
if code ~= '' then
  seq = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[4], 'NX', seq, ARGV[3])
  redis.call('ZADD', KEYS[9], 'NX', seq, ARGV[3])
  redis.call('HINCRBY', KEYS[10], code, 1)
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'ADDED', seq, ARGV[3]}
end
if window > drawn then
  redis.call('ZADD', KEYS[6], window, ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'POOLED', window, ARGV[3]}
end
local lateNow = redis.call('ZCARD', KEYS[7])
if lateNow > 0 or (window == 0 and redis.call('ZCARD', KEYS[6]) > 0) then
  if lateNow == 0 then
    -- The late ones queue behind every window pooled so far (draw_finish.lua).
    local top = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
    redis.call('HSET', KEYS[8], 'lateAfter', top[2])
  end
  redis.call('ZADD', KEYS[7], tonumber(ARGV[2]), ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'LATE', tonumber(ARGV[2]), ARGV[3]}
end
seq = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[4], 'NX', seq, ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'ADDED', seq, ARGV[3]}
