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
-- while publishing fails; scanned in pages, stopping at the token.
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp then
  return false
end
local n = redis.call('LLEN', KEYS[2])
local pre = ARGV[1] .. '\t'
for lo = 0, n - 1, 256 do
  for _, e in ipairs(redis.call('LRANGE', KEYS[2], lo, lo + 255)) do
    if string.sub(e, 1, #pre) == pre then
      return false
    end
  end
end
return exp
