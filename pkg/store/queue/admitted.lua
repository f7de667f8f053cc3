-- admitted: when a token's admission expires, once it is on the record.
-- KEYS[1] wr:{item}:admitted     ZSET tokenId scored by admission expiry (ms)
-- KEYS[2] wr:{item}:unpublished  LIST admissions not on waitroom.admissions yet,
--                                "tokenId<TAB>expiry<TAB>offsets" each (prelude's admit)
-- ARGV[1] tokenId
-- Returns the expiry (ms, may be past), or false when the token is not
-- admitted or its admission is not published yet (unpublished.lua): nothing
-- may use it (verify, complete) before.
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or unpublished(KEYS[2], ARGV[1], exp) then
  return false
end
return exp
