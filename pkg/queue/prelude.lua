-- prelude: the rules the line's scripts share, written once and prepended to
-- every script that uses them when it is embedded (queue.go, withPrelude).
-- Local functions only: a script's own text follows.

-- replayed reports whether offset off of partition part was applied before,
-- as applied (the item's HASH partition -> highest applied offset) says: a
-- record applies once.
local function replayed(applied, part, off)
  local last = redis.call('HGET', applied, part)
  return last ~= false and tonumber(last) >= tonumber(off)
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

