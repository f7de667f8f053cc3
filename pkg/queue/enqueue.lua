-- enqueue: apply a run of register records of waitroom.registrations to one
-- item's line, in order: one call per item and consumer batch instead of one
-- per record (at most queue.EnqueueBatch records a call).
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:users     HASH place key -> tokenId ("!L"..tokenId once the user left,
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
-- ARGV: 8 per record, in record order: partition, offset, tokenId, place key,
--   the draw window of the register (unix ms; 0: first come, first served),
--   the bypass code id ("": none), the code's count (0: it had expired when
--   the record was made), the record's timestamp (unix ms; the moment an
--   admission is judged live at: a function of the record, so a rebuild
--   applies it alike; 0: Redis's clock, for ops made without a record)
-- Returns one {outcome, seq, tokenId} per record: ADDED with the new seq; DUPLICATE with the live
-- tokenId of that user (waiting, pooled, late or admitted); REPLAY when the offset
-- was applied before; POOLED with the window when the register waits for its
-- window's draw (window above the last drawn one); LATE with the offset when it
-- must queue behind a pending draw (no window while the pool holds people, or
-- others are late already); with a bypass code, ADDED with the place also in
-- express (admitted at the next tick, past any pending draw: see promote.lua)
-- and the use counted, or EXHAUSTED (no use left: applied, never placed, status
-- REJECTED); a user already holding a place keeps it and uses nothing.
-- or {'ERR', 0, message} for a record Redis refused (a corrupt key): each
-- record reads (and so type-checks) every key it writes before its first
-- write, so a refused record leaves nothing behind and the records after it
-- are applied as if alone. The call itself never fails after a write: a
-- record's error is a value. (Redis refuses a script's write for lack of
-- memory only at its first write, so an OOM is the error of every record that
-- would write, and nothing is written.)
-- What every record of the call reads alike (the applied offsets, the seq,
-- the last draw, the sizes of the pool and the late set, the key types) is
-- read once, when a record first needs it, and then kept in step with the
-- call's own writes; the applied offsets are written once, at the end.

local known = {} -- name -> value read once (false: unusable), kept in step
local function read(name, f)
  local v = known[name]
  if v == nil then
    v = f()
    known[name] = v
  end
  return v
end
local applied = {} -- partition -> the offset this call applied last

local function one(a)
  local part, off, tok, user, win, code, count, at =
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], tonumber(ARGV[a + 7])
  off = tonumber(off)
  local last = read('applied:' .. part, function()
    return tonumber(redis.call('HGET', KEYS[1], part) or '-1')
  end)
  if last >= off then
    return {'REPLAY', 0, ''}
  end
  local cur = redis.call('HGET', KEYS[2], user)
  local dup = nil
  if cur and string.sub(cur, 1, 1) ~= '!' then
    local s = redis.call('ZSCORE', KEYS[4], cur)
    if s then
      dup = {'DUPLICATE', tonumber(s), cur}
    else
      local exp = redis.call('ZSCORE', KEYS[5], cur)
      if exp then
        if at == 0 then
          local t = redis.call('TIME')
          at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        if tonumber(exp) > at then
          dup = {'DUPLICATE', 0, cur}
        end
      end
    end
  end
  if not dup and cur and string.sub(cur, 1, 1) ~= '!' and
      (redis.call('ZSCORE', KEYS[6], cur) or redis.call('ZSCORE', KEYS[7], cur)) then
    dup = {'DUPLICATE', 0, cur}
  end
  if not dup and waits(tok, KEYS[4], KEYS[6], KEYS[7]) then
    dup = {'DUPLICATE', 0, tok}
  end
  read('admitted', function() -- type-checks the admitted set
    redis.call('ZSCORE', KEYS[5], tok)
    return true
  end)
  local window = tonumber(win) or 0
  local drawn = read('drawn', function()
    return tonumber(redis.call('HGET', KEYS[8], 'window') or '0') or 0
  end)
  local code, uses = code or '', 0
  if code ~= '' then
    read('express', function() -- type-checks the express set
      redis.call('ZSCORE', KEYS[9], tok)
      return true
    end)
    uses = tonumber(redis.call('HGET', KEYS[10], code) or '0')
    if not uses then
      return {'ERR', 0, 'ERR corrupt ' .. KEYS[10] .. ': uses of ' .. code .. ' not a number'}
    end
  end
  if dup then
    applied[part], known['applied:' .. part] = off, off
    return dup
  end
  if code ~= '' and uses >= tonumber(count) then
    applied[part], known['applied:' .. part] = off, off
    return {'EXHAUSTED', 0, ''}
  end
  local seqOK = read('seq', function()
    local v = tonumber(redis.call('GET', KEYS[3]) or '0')
    return v ~= nil and v == math.floor(v)
  end)
  if not seqOK then
    return {'ERR', 0, 'ERR corrupt ' .. KEYS[3] .. ': not an integer'}
  end
  if code ~= '' then
    local seq = redis.call('INCR', KEYS[3])
    redis.call('ZADD', KEYS[4], 'NX', seq, tok)
    redis.call('ZADD', KEYS[9], 'NX', seq, tok)
    redis.call('HINCRBY', KEYS[10], code, 1)
    redis.call('HSET', KEYS[2], user, tok)
    applied[part], known['applied:' .. part] = off, off
    return {'ADDED', seq, tok}
  end
  local pooled = read('pool', function() return redis.call('ZCARD', KEYS[6]) end)
  if window > drawn then
    known['pool'] = pooled + redis.call('ZADD', KEYS[6], window, tok)
    redis.call('HSET', KEYS[2], user, tok)
    applied[part], known['applied:' .. part] = off, off
    return {'POOLED', window, tok}
  end
  local lateNow = read('late', function() return redis.call('ZCARD', KEYS[7]) end)
  if lateNow > 0 or (window == 0 and pooled > 0) then
    if lateNow == 0 then
      -- The late ones queue behind every window pooled so far (draw_finish.lua).
      local top = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
      redis.call('HSET', KEYS[8], 'lateAfter', top[2])
    end
    known['late'] = lateNow + redis.call('ZADD', KEYS[7], off, tok)
    redis.call('HSET', KEYS[2], user, tok)
    applied[part], known['applied:' .. part] = off, off
    return {'LATE', off, tok}
  end
  local seq = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[4], 'NX', seq, tok)
  redis.call('HSET', KEYS[2], user, tok)
  applied[part], known['applied:' .. part] = off, off
  return {'ADDED', seq, tok}
end

local out = {}
for a = 1, #ARGV - 7, 8 do
  local ok, r = pcall(one, a)
  if not ok then
    r = {'ERR', 0, type(r) == 'table' and tostring(r.err) or tostring(r)}
  end
  out[#out + 1] = r
end
-- Every partition's applied offset was read (and KEYS[1] type-checked) before
-- a record of it wrote, so these cannot fail.
for part, off in pairs(applied) do
  redis.call('HSET', KEYS[1], part, off)
end
return out
