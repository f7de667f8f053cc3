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
-- KEYS[11] wr:{item}:changes  STRING changes of the line (the prelude's changed): one a call that applied
-- ARGV[1] the records' partition  ARGV[2] the fields per record, 3, 4 or 7
-- ARGV[3] '1' when the records' offsets increase and no place key and no
--   tokenId appears twice among them, else '0' (then every record is read as
--   one() reads it, below)
-- ARGV[4] the records' timestamps, each the same width (#ARGV[4] / records
--   digits, zero-padded), in record order: unix ms, the moment an admission
--   is judged live at (a function of the record, so a rebuild applies it
--   alike; 0: Redis's clock, for ops made without a record). One argument,
--   not one a record: only a record whose place key's holder is admitted
--   reads its time.
-- ARGV[5] the records' offsets, likewise each the same width, zero-padded,
--   in record order: one argument, not one a record (a Redis argument and
--   a Lua string less a record); a fresh call reads only the first and the
--   last of each run bulk() applies.
-- Then the fields column by column, each in record order: every tokenId,
--   with 4 or 7 every place key, and with 7 every draw window
--   (unix ms; 0: first come, first served), every bypass code id ("": none),
--   every code's count (0: it had expired when the record was made). With 3
--   the place key is the tokenId; with 3 or 4 the window is 0 and no code was
--   used (most registrations: fewer arguments for Redis to read). Columns let
--   the reads of the whole call take their members straight from ARGV.
-- Returns the answers of the records in one flat array, in record order
-- (no table a record: Redis reads each table of a reply field by field):
--   the new seq (an integer), when the record's token was ADDED at the back
--   of the line (with a bypass code: its place also in express, admitted at
--   the next tick past any pending draw, see promote.lua, and the use
--   counted); -m then s (two integers) for m > 1 records in a row ADDED at
--   seqs s, s + 1, ..., s + m - 1 (bulk() below: one answer a run, not one
--   a record); 0 when the offset was applied before (REPLAY); else three
--   values, outcome, seq, tokenId: DUPLICATE with the live tokenId of that
--   user (waiting, pooled, late or admitted) and its seq if waiting (else
--   0) or, with an empty tokenId, for a token whose own
--   place has ended (left, completed, abandoned, admission expired): a token
--   is placed once; POOLED with the window when the register waits for its window's draw
--   (window above the last drawn one); LATE with the offset when it must
--   queue behind a pending draw (no window while the pool holds people, or
--   others are late already); EXHAUSTED for a bypass code with no use left
--   (applied, never placed, status REJECTED; a user already holding a place
--   keeps it and uses nothing); or 'ERR', 0, message for a record Redis
--   refused (a corrupt key).
-- Each record reads (and so type-checks) every key it writes before its
-- first write, so a refused record leaves nothing behind and the records
-- after it are applied as if alone. The call itself never fails after a
-- write: a record's error is a value. (Redis refuses a script's write for
-- lack of memory only at its first write, so an OOM refuses a call that had
-- not written yet as a whole, and nothing is written.)
--
-- Cost: what every record of the call reads alike (the applied offsets, the
-- seq, the last draw, the sizes of the pool and the late set, the key types)
-- is read once, when a record first needs it; the place keys' holders and
-- the tokens' places in the line are read for the whole call at once (HMGET,
-- ZMSCORE); the writes every placed record makes (the seq, the waiting set,
-- the users hash) are made once, at the end, with the applied offsets. The
-- records read what the records before them wrote from this call's own
-- tables, so they are applied exactly as one by one: in a fresh call (ARGV[3])
-- the plain new records (bulk() below) read the first reads by record
-- position, with no table a record but the writes' lists, and the caches of
-- one() are filled from those reads and bulk()'s runs only when one() first
-- needs them (sync). Every key written at the end was read (and so
-- type-checked) before, so those writes cannot fail but for memory at the
-- call's first write, which leaves nothing written.

local part, stride, fresh, times, offs = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4], ARGV[5]
local n = math.floor((#ARGV - 5) / (stride - 2)) -- records
-- Record i's offset is offset(i), its tokenId ARGV[K + i], its place key
-- ARGV[U + i]; with 7 fields its window ARGV[W + i], its code
-- ARGV[W + n + i], the code's count ARGV[W + 2 * n + i].
local K = 5
local U = stride > 3 and K + n or K
local W = U + n
local tw = n > 0 and math.floor(#times / n) or 0 -- the width of a timestamp
local ow = n > 0 and math.floor(#offs / n) or 0  -- the width of an offset
local sub = string.sub

local function offset(i)
  return tonumber(sub(offs, (i - 1) * ow + 1, i * ow))
end
local CHUNK = 1000 -- arguments a command: bounded, whatever the call's size

-- Read once, kept in step with this call's writes (nil: not read yet).
local last                     -- the partition's highest applied offset
local poolN, lateN, drawn, seq -- sizes of the pool and the late set, last drawn window, the seq
local seqOK, admittedOK, expressOK
local holder = {}              -- place key -> tokenId in the users hash (false: none)
local seqOf = {}               -- tokenId -> its score in waiting (false: not there)
-- What the call's first reads found, by record (nil: not read): held[i] the
-- holder of record i's place key (false: none), inLine[i] its token's score
-- in the line (false: not there). The records one() applies read them
-- through holder and seqOf (sync); bulk() reads them by position, which is
-- what the call knows when no place key and no token repeats (fresh).
local held, inLine = {}, {}
-- Written at the end, in record order.
local setUsers, addWaiting, nUsers, nWaiting = {}, {}, 0, 0

-- The holders of every record's place key, the places in the line of the
-- holders, then of the tokens whose holder is not in the line (a token is
-- looked up only when its holder's place is not what the record finds), in
-- up to three commands. If a key has the wrong type this fails and the
-- records read one by one, each refused on its own.
pcall(function()
  local argv, byte = ARGV, string.byte
  for lo = 1, n, CHUNK do
    local hi = math.min(lo + CHUNK - 1, n)
    local cur = redis.call('HMGET', KEYS[2], unpack(argv, U + lo, U + hi))
    if lo == 1 then
      held = cur
    else
      for j = lo, hi do held[j] = cur[j - lo + 1] end
    end
  end
  local curs, nc = {}, 0
  for j = 1, n do
    local c = held[j]
    if c and byte(c) ~= 33 then -- not '!': a live holder
      nc = nc + 1
      curs[nc] = c
    end
  end
  if nc == 0 then -- most calls: every token
    for lo = 1, n, CHUNK do
      local hi = math.min(lo + CHUNK - 1, n)
      local s = redis.call('ZMSCORE', KEYS[4], unpack(argv, K + lo, K + hi))
      if lo == 1 then
        inLine = s
      else
        for j = lo, hi do inLine[j] = s[j - lo + 1] end
      end
    end
    return
  end
  for lo = 1, nc, CHUNK do
    local hi = math.min(lo + CHUNK - 1, nc)
    local s = redis.call('ZMSCORE', KEYS[4], unpack(curs, lo, hi))
    for j = lo, hi do seqOf[curs[j]] = s[j - lo + 1] end
  end
  local rest, at, m = {}, {}, 0
  for j = 1, n do
    local c = held[j]
    if not (c and seqOf[c]) then
      m = m + 1
      rest[m], at[m] = argv[K + j], j
    end
  end
  for lo = 1, m, CHUNK do
    local hi = math.min(lo + CHUNK - 1, m)
    local s = redis.call('ZMSCORE', KEYS[4], unpack(rest, lo, hi))
    for j = lo, hi do inLine[at[j]] = s[j - lo + 1] end
  end
end)

-- The runs of records bulk() applied: first record, last record, first
-- seq (three values a run); the caches hold the writes of the first
-- synced / 3 runs, and the first reads once primed.
local runs, nRuns, synced, primed = {}, 0, 0, false

-- sync brings holder and seqOf up to what the call knows before one()
-- applies a record: the first reads (once), then bulk()'s writes since.
local function sync()
  local argv = ARGV
  if not primed then
    primed = true
    for j = 1, n do
      local c, s = held[j], inLine[j]
      if c ~= nil then holder[argv[U + j]] = c end
      if s ~= nil then seqOf[argv[K + j]] = s end
    end
  end
  while synced < nRuns do
    local i0, i1, s0 = runs[synced + 1], runs[synced + 2], runs[synced + 3]
    for j = i0, i1 do
      local tok = argv[K + j]
      holder[argv[U + j]], seqOf[tok] = tok, s0 + j - i0
    end
    synced = synced + 3
  end
end

-- cached is cache[member], read from Redis (cmd key member) when the call has
-- not read or written it yet.
local function cached(cache, cmd, key, member)
  local v = cache[member]
  if v == nil then
    v = redis.call(cmd, key, member)
    cache[member] = v
  end
  return v
end

-- score is tok's score in the line (KEYS[4]), the pool (KEYS[6]) or the late
-- set (KEYS[7]) as this call knows it: the line from its reads and writes;
-- the pool and the late set from Redis, once their ZCARD (which type-checks
-- them as the ZSCORE would) says they are not empty.
local function score(key, tok)
  if key == KEYS[4] then
    return cached(seqOf, 'ZSCORE', key, tok)
  elseif key == KEYS[6] then
    if poolN == nil then poolN = redis.call('ZCARD', key) end
    return poolN > 0 and redis.call('ZSCORE', key, tok)
  end
  if lateN == nil then lateN = redis.call('ZCARD', key) end
  return lateN > 0 and redis.call('ZSCORE', key, tok)
end

local done = false -- whether this call applied a record (then last is its offset)

local function place(user, tok)
  setUsers[nUsers + 1], setUsers[nUsers + 2], nUsers = user, tok, nUsers + 2
  holder[user] = tok
end

local function line(tok) -- a place at the back of the line (the seq was checked)
  seq = seq + 1
  addWaiting[nWaiting + 1], addWaiting[nWaiting + 2], nWaiting = seq, tok, nWaiting + 2
  seqOf[tok] = seq
end

local function one(i)
  local off, tok, user, win, code, count = offset(i), ARGV[K + i], ARGV[U + i], nil, '', nil
  if stride > 4 then
    win, code, count = ARGV[W + i], ARGV[W + n + i], ARGV[W + 2 * n + i]
  end
  if last == nil then
    last = tonumber(redis.call('HGET', KEYS[1], part) or '-1')
  end
  if last >= off then
    return 0
  end
  local cur = holder[user]
  if cur == nil then
    cur = cached(holder, 'HGET', KEYS[2], user)
  end
  local dup, dupSeq = nil, 0 -- the live token holding the place, its seq if waiting
  if cur and string.sub(cur, 1, 1) ~= '!' then
    local s = cached(seqOf, 'ZSCORE', KEYS[4], cur)
    if s then
      dup, dupSeq = cur, tonumber(s)
    else
      local exp = redis.call('ZSCORE', KEYS[5], cur)
      if exp then
        local at = tonumber(string.sub(times, (i - 1) * tw + 1, i * tw))
        if at == 0 then
          local t = redis.call('TIME')
          at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        if tonumber(exp) > at then
          dup = cur
        end
      end
      if not dup and (score(KEYS[6], cur) or score(KEYS[7], cur)) then
        dup = cur
      end
    end
  end
  if not dup and waits(tok, KEYS[4], KEYS[6], KEYS[7], score) then
    dup = tok
  end
  if not admittedOK then -- type-checks the admitted set
    redis.call('ZSCORE', KEYS[5], tok)
    admittedOK = true
  end
  local window = win and tonumber(win) or 0
  if drawn == nil then
    drawn = tonumber(redis.call('HGET', KEYS[8], 'window') or '0') or 0
  end
  local uses = 0
  if code ~= '' then
    if not expressOK then -- type-checks the express set
      redis.call('ZSCORE', KEYS[9], tok)
      expressOK = true
    end
    local v = redis.call('HGET', KEYS[10], code)
    uses = counter(v) and tonumber(v or '0')
    if not uses then
      return 'ERR', 0, 'ERR corrupt ' .. KEYS[10] .. ': uses of ' .. code .. ' not a number'
    end
  end
  if dup then
    last, done = off, true
    return 'DUPLICATE', dupSeq, dup
  end
  if cur and (cur == tok or string.sub(cur, 3) == tok) then
    -- This very token held the place before (a retried registration: the
    -- api derives a requestId's tokenId) and it has ended: it is placed
    -- once, never again.
    last, done = off, true
    return 'DUPLICATE', 0, ''
  end
  if code ~= '' and uses >= tonumber(count) then
    last, done = off, true
    return 'EXHAUSTED', 0, ''
  end
  if seqOK == nil then
    local v = redis.call('GET', KEYS[3]) or '0'
    -- What INCR would take: a decimal integer, no sign but '-', no leading zero.
    seqOK = (v == '0' or string.match(v, '^%-?[1-9]%d*$') ~= nil) and #v <= 17
    seq = seqOK and tonumber(v) or 0
  end
  if not seqOK then
    return 'ERR', 0, 'ERR corrupt ' .. KEYS[3] .. ': not an integer'
  end
  if code ~= '' then
    line(tok)
    redis.call('ZADD', KEYS[9], 'NX', seq, tok)
    redis.call('HINCRBY', KEYS[10], code, 1)
    place(user, tok)
    last, done = off, true
    return seq
  end
  if poolN == nil then poolN = redis.call('ZCARD', KEYS[6]) end
  if window > drawn then
    poolN = poolN + redis.call('ZADD', KEYS[6], window, tok)
    place(user, tok)
    last, done = off, true
    return 'POOLED', window, tok
  end
  if lateN == nil then lateN = redis.call('ZCARD', KEYS[7]) end
  if lateN > 0 or (window == 0 and poolN > 0) then
    if lateN == 0 then
      -- The late ones queue behind every window pooled so far (draw_finish.lua).
      local top = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
      redis.call('HSET', KEYS[8], 'lateAfter', top[2])
    end
    lateN = lateN + redis.call('ZADD', KEYS[7], off, tok)
    place(user, tok)
    last, done = off, true
    return 'LATE', off, tok
  end
  line(tok)
  place(user, tok)
  last, done = off, true
  return seq
end

-- plain: whether the call may apply plain new records in bulk (below):
-- the reads such a record makes, made once, succeeded and found the applied
-- offset a number and the seq an integer. A read that fails leaves what it
-- read before it cached, as one would have, and the records go one by one
-- (each refused on its own, as a value).
local plain = pcall(function()
  if last == nil then last = tonumber(redis.call('HGET', KEYS[1], part) or '-1') end
  if poolN == nil then poolN = redis.call('ZCARD', KEYS[6]) end
  if lateN == nil then lateN = redis.call('ZCARD', KEYS[7]) end
  if not admittedOK then
    redis.call('ZCARD', KEYS[5]) -- type-checks the admitted set
    admittedOK = true
  end
  if drawn == nil then drawn = tonumber(redis.call('HGET', KEYS[8], 'window') or '0') or 0 end
  if seqOK == nil then
    local v = redis.call('GET', KEYS[3]) or '0'
    seqOK = (v == '0' or string.match(v, '^%-?[1-9]%d*$') ~= nil) and #v <= 17
    seq = seqOK and tonumber(v) or 0
  end
end) and seqOK and last ~= nil

local out, k = {}, 0

-- past: whether a record before this one had an offset above the applied
-- one; the offsets of a fresh call increase, so every record after it is
-- new (bulk() reads no offset but a run's last).
local past = false

-- TWO are the two-digit endings of a number, by value + 1: bulk() makes a
-- score of the line as the hundreds (formatted once a hundred records) ..
-- TWO[last two digits + 1], a concatenation instead of a string.format a
-- record (whose sprintf costs several times more). A literal table: no
-- string made at a call, the constants are the compiled script's.
local TWO = {
  '00', '01', '02', '03', '04', '05', '06', '07', '08', '09', '10', '11', '12', '13', '14', '15',
  '16', '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30', '31',
  '32', '33', '34', '35', '36', '37', '38', '39', '40', '41', '42', '43', '44', '45', '46', '47',
  '48', '49', '50', '51', '52', '53', '54', '55', '56', '57', '58', '59', '60', '61', '62', '63',
  '64', '65', '66', '67', '68', '69', '70', '71', '72', '73', '74', '75', '76', '77', '78', '79',
  '80', '81', '82', '83', '84', '85', '86', '87', '88', '89', '90', '91', '92', '93', '94', '95',
  '96', '97', '98', '99'
}
local HMAX = 1e13

-- bulk applies the plain new records from record i on, while the pool and
-- the late set are empty, and returns the first record it left: a record
-- not applied before, with no bypass code, no window past the last draw,
-- whose place key has no holder and whose token is not in the line (as the
-- call's first reads say: no record before it in the call had its place key
-- or its token, fresh) is ADDED at the back of the line, exactly as one()
-- would add it, without one()'s lookups. Most records are such.
local function bulk(i)
  if not (plain and fresh and poolN == 0 and lateN == 0) then return i end
  local argv, fmt, hd, il = ARGV, string.format, held, inLine
  if not past then
    local off = offset(i)
    if not off or off <= last then return i end
    past = true
  end
  local nw, nu, s = nWaiting, nUsers, seq
  local i0 = i
  -- The next score is h * 100 + r (0 <= r < 100), written hs .. TWO[r + 1]
  -- while 0 < h < HMAX (where the division is exact: far past any line);
  -- else (hs nil) by string.format. Either way the digits of the integer,
  -- as Redis would write the number (%.17g).
  local h = math.floor((s + 1) / 100)
  local r = s + 1 - h * 100
  local hs = h > 0 and h < HMAX and fmt('%d', h) or nil
  while i <= n do
    if stride > 4 then
      local w = tonumber(argv[W + i])
      if argv[W + n + i] ~= '' or not w or w > drawn then break end
    end
    if hd[i] ~= false or il[i] ~= false then break end
    local tok = argv[K + i]
    s = s + 1
    if hs then
      addWaiting[nw + 1] = hs .. TWO[r + 1]
    else
      addWaiting[nw + 1] = fmt('%d', s)
    end
    addWaiting[nw + 2], nw = tok, nw + 2
    setUsers[nu + 1], setUsers[nu + 2], nu = argv[U + i], tok, nu + 2
    r, i = r + 1, i + 1
    if r == 100 then
      h, r = h + 1, 0
      hs = h > 0 and h < HMAX and fmt('%d', h) or nil
    end
  end
  if i > i0 then
    runs[nRuns + 1], runs[nRuns + 2], runs[nRuns + 3], nRuns = i0, i - 1, seq + 1, nRuns + 3
    if i - i0 > 1 then
      out[k + 1], out[k + 2], k = i0 - i, seq + 1, k + 2
    else
      out[k + 1], k = s, k + 1
    end
    nWaiting, nUsers, seq, last, done = nw, nu, s, offset(i - 1), true
  end
  return i
end

local i = bulk(1)
while i <= n do
  sync()
  local ok, r, v, t = pcall(one, i)
  if not ok then
    r, v, t = 'ERR', 0, type(r) == 'table' and tostring(r.err) or tostring(r)
  end
  if type(r) == 'number' then
    out[k + 1], k = r, k + 1
  else
    out[k + 1], out[k + 2], out[k + 3], k = r, v, t, k + 3
  end
  i = bulk(i + 1)
end
-- Every key below was read (and so type-checked) before a record wrote it,
-- so these cannot fail but for memory at the call's first write.
for lo = 1, nWaiting, CHUNK do
  redis.call('ZADD', KEYS[4], 'NX', unpack(addWaiting, lo, math.min(lo + CHUNK - 1, nWaiting)))
end
if nWaiting > 0 then
  redis.call('SET', KEYS[3], seq)
end
for lo = 1, nUsers, CHUNK do
  redis.call('HSET', KEYS[2], unpack(setUsers, lo, math.min(lo + CHUNK - 1, nUsers)))
end
if done then
  changed(KEYS[11])
  redis.call('HSET', KEYS[1], part, last)
end
return out
