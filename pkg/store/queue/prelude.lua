-- prelude: the rules the line's scripts share, written once and prepended to
-- every script that uses them when it is embedded (queue.go, withPrelude).
-- Local functions only: a script's own text follows.

-- ENDED are the markers of an ended place in the users hash (place key ->
-- marker .. tokenId), by the state linesnap names it with.
local ENDED = {LEFT = '!L', ABANDONED = '!A', COMPLETED = '!C'}

-- replayed reports whether offset off of partition part was applied before,
-- as applied (the item's HASH partition -> highest applied offset) says: a
-- record applies once.
local function replayed(applied, part, off)
  local last = redis.call('HGET', applied, part)
  return last ~= false and tonumber(last) >= tonumber(off)
end

-- counter reports whether v (a value read, false: none) is a count
-- HINCRBY and INCR take: none, or a decimal integer (no sign but '-', no
-- leading zero, no fraction or exponent, no space), that tonumber reads
-- exactly. tonumber alone takes "1.5", "1e3" or " 1", which they refuse:
-- a script that checked with it would fail at that write, after others.
local function counter(v)
  return not v or ((v == '0' or string.match(v, '^%-?[1-9]%d*$') ~= nil) and #v <= 17)
end

-- waits reports whether tok holds a place that still waits for admission:
-- in the line (waiting), in the pool of a draw to come, or placed behind it
-- (late). Each lookup also type-checks its key. score(key, tok), when given,
-- looks tok up instead of ZSCORE (enqueue.lua: from what its call read).
local function waits(tok, waiting, pool, late, score)
  if score then
    return (score(waiting, tok) or score(pool, tok) or score(late, tok)) and true or false
  end
  return (redis.call('ZSCORE', waiting, tok) or redis.call('ZSCORE', pool, tok) or
    redis.call('ZSCORE', late, tok)) and true or false
end

-- changed counts one change of the item's line in changes (wr:{item}:changes,
-- a STRING): every script that writes a place or an applied offset calls it
-- once a call that wrote, so the count only grows while the item's keys live
-- (a rebuild empties it and replays through the same scripts). A watcher that
-- saw a higher count than the item's node now holds knows that node lost
-- writes, whichever they were (a leave, a completion, an abandon: none moves
-- the seq or the head), as when a replica that was behind took over. A
-- corrupt count is replaced by 1, which a watcher takes for such a loss, so
-- the call fails for nothing but memory.
local function changed(key)
  if type(redis.pcall('INCR', key)) == 'table' then
    redis.call('SET', key, 1)
  end
end

-- admit writes one tick's admissions, the one write of an admission: promote.lua
-- calls it with what it decided, apply_admission.lua with what the record says
-- promote decided, so the line a rebuild replays is the line live wrote.
-- toks are the admitted tokenIds in admission order, the first nx of them
-- through the express set (bypass places: they do not move the head); each
-- leaves the line and the express set and is admitted until exps[i] (exps a
-- table, or one number for all). head, when not nil, is the new head (the
-- highest FIFO seq admitted). The tick is counted in the pace window as
-- "now:n". unpub, when not nil, is the unpublished list:
-- each token is pushed as "tokenId<TAB>expiry<TAB>mark" (mark: the item's
-- applied offsets when promote decided, see appliedMark) for the scheduler
-- to publish; admit returns the first keep of the entries it pushed (keep
-- nil: none). front, when true, says toks after the first nx are the line's
-- first members once those nx left it (promote read them from the front):
-- they leave by rank, one ZREMRANGEBYRANK instead of a ZREM of each member
-- (the same line; Redis finds no member and parses no argument).
-- k: {waiting, admitted, head, paced, express, changes}.
local ADMIT_CHUNK = 1000
local function admit(k, toks, nx, exps, head, now, unpub, mark, front, keep)
  local many = type(exps) == 'table'
  local kept = {}
  keep = keep or 0
  local one, tail = exps, nil
  if not many then
    -- One expiry: formatted once, not by Redis (%.17g) for each ZADD score
    -- and by Lua (%.14g) for each entry it is concatenated into.
    one = string.format('%.17g', exps)
    if unpub then tail = '\t' .. string.format('%.14g', exps) .. '\t' .. mark end
  end
  for lo = 1, #toks, ADMIT_CHUNK do
    local hi = math.min(lo + ADMIT_CHUNK - 1, #toks)
    local z, u, nz = {}, {}, 0
    for i = lo, hi do
      local tok = toks[i]
      if many then
        z[nz + 1] = exps[i]
        if unpub then u[i - lo + 1] = tok .. '\t' .. exps[i] .. '\t' .. mark end
      else
        z[nz + 1] = one
        if unpub then u[i - lo + 1] = tok .. tail end
      end
      z[nz + 2], nz = tok, nz + 2
    end
    if not front then
      redis.call('ZREM', k[1], unpack(toks, lo, hi))
    elseif lo <= nx then
      redis.call('ZREM', k[1], unpack(toks, lo, math.min(hi, nx)))
    end
    if lo <= nx then
      redis.call('ZREM', k[5], unpack(toks, lo, math.min(hi, nx)))
    end
    redis.call('ZADD', k[2], unpack(z))
    if unpub then
      redis.call('RPUSH', unpub, unpack(u))
      for i = lo, math.min(hi, keep) do
        kept[i] = u[i - lo + 1]
      end
    end
  end
  if front and #toks > nx then
    redis.call('ZREMRANGEBYRANK', k[1], 0, #toks - nx - 1)
  end
  if head then
    redis.call('SET', k[3], head)
  end
  if #toks > 0 then
    redis.call('RPUSH', k[4], now .. ':' .. #toks)
    changed(k[6])
  end
  return kept
end

-- appliedMark is the item's applied registrations offsets as one string,
-- "partition:offset,..." ("" when none): an admission carries it on
-- waitroom.admissions so a rebuild applies it after exactly those records.
local function appliedMark(applied)
  local kv = redis.call('HGETALL', applied)
  local out = {}
  for i = 1, #kv, 2 do
    out[#out + 1] = kv[i] .. ':' .. kv[i + 1]
  end
  return table.concat(out, ',')
end

-- prunePace drops the pace window's entries older than a minute at now
-- (oldest first, at most 1000 a call) and returns sum60 less what they
-- counted, and how many entries to LTRIM. paced: the LIST of "ms:n".
local function prunePace(paced, now, sum60)
  local drop = 0
  for _, oldest in ipairs(redis.call('LRANGE', paced, 0, 999)) do
    local ms, cnt = string.match(oldest, '^(%d+):(%d+)$')
    if ms and tonumber(ms) > now - 60000 then break end
    if cnt then sum60 = sum60 - tonumber(cnt) end -- an unreadable entry is dropped
    drop = drop + 1
  end
  return sum60, drop
end

-- drawing reports a draw half applied: draw.lua placed some of its pooled
-- people (drawn.drawing names its record, "partition:offset") and the record
-- is not applied yet (draw_finish.lua records it, or the consumer marked it
-- dead-lettered). promote admits nobody from the line meanwhile, so every
-- admission is decided at an applied offset before or after a whole draw,
-- where a rebuild replays it.
local function drawing(drawn, applied)
  local at = redis.call('HGET', drawn, 'drawing')
  if not at then return false end
  local part, off = string.match(at, '^(%d+):(%d+)$')
  if not part then return false end
  local last = redis.call('HGET', applied, part)
  return not last or tonumber(last) < tonumber(off)
end
