-- unpublished: the rule that an admission is not told, verified or completed
-- before it is on waitroom.admissions (Kafka is the record: a failover
-- rebuilds the view from Kafka, where an unpublished admission never
-- happened). Prepended to the scripts that read admissions (status.lua,
-- admitted.lua).
-- unpublished(list, tok, exp): the length of the item's unpublished LIST
-- ("tokenId<TAB>expiry<TAB>offsets" each, prelude's admit) when tok (admitted
-- until exp) is still on it, false when it is published. The list holds what
-- was admitted since the last acknowledged publish: empty or one tick's
-- admissions, longer only while publishing fails. Its first 4096 entries are
-- searched at once (plain find); past them (a big tick) entries are in
-- admission order, so an expiry no earlier than the 4096th entry's is taken
-- for unpublished.
local function unpublished(list, tok, exp)
  local n = redis.call('LLEN', list)
  if n == 0 then
    return false
  end
  local es = redis.call('LRANGE', list, 0, 4095)
  local page = '\n' .. table.concat(es, '\n')
  if string.find(page, '\n' .. tok .. '\t', 1, true) or
    (n > #es and tonumber(exp) >= tonumber(string.match(es[#es], '\t([^\t]*)'))) then
    return n
  end
  return false
end
