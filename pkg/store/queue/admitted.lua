-- admitted: when a token's admission expires, once it is on the record.
-- KEYS[1] wr:{item}:admitted     ZSET tokenId scored by admission expiry (ms)
-- KEYS[2] wr:{item}:unpublished  LIST admissions not on waitroom.admissions yet,
--                                "tokenId<TAB>expiry<TAB>offsets" each (prelude's admit)
-- ARGV[1] tokenId
-- Returns the expiry (ms, may be past), or false when the token is not
-- admitted or its admission is not published yet: a failover rebuilds the view
-- from Kafka, where an unpublished admission never happened, so nothing may
-- use it (verify, complete) before. The list holds what was admitted since
-- the last acknowledged publish: empty or one tick's admissions, longer only
-- while publishing fails. Its first 4096 entries are searched at once (plain
-- find); past them (a big tick) entries are in admission order, so an expiry
-- no earlier than the 4096th entry's is taken for unpublished.
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then
  return false
end
local n = redis.call('LLEN', KEYS[2])
if n > 0 then
  local es = redis.call('LRANGE', KEYS[2], 0, 4095)
  local page = '\n' .. table.concat(es, '\n')
  if string.find(page, '\n' .. ARGV[1] .. '\t', 1, true) or
    (n > #es and tonumber(exp) >= tonumber(string.match(es[#es], '\t([^\t]*)'))) then
    return false
  end
end
return exp
