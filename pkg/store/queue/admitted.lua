-- admitted: when a token's admission expires, once it is on the record.
-- KEYS[1] wr:{item}:admitted     ZSET tokenId scored by admission expiry (ms)
-- KEYS[2] wr:{item}:unpublished  LIST admissions not on waitroom.admissions yet,
--                                "tokenId<TAB>expiry<TAB>offsets" each (prelude's admit)
-- ARGV[1] tokenId  ARGV[2] 'told': to tell the admission (a stream's read),
--                  '': for the holder of its admission token (verify, complete)
-- Returns the expiry (ms, may be past), or false when the token is not
-- admitted or, to tell it, its admission is not published yet
-- (unpublished.lua). A holder of the admission token was told it from a
-- published admission (an ADMITTED status read, or the notifier's event
-- from the topic), so its admission is on the record even while the
-- scheduler's acknowledgement of the publish is still on its way.
local exp = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not exp or (ARGV[2] == 'told' and unpublished(KEYS[2], ARGV[1], exp)) then
  return false
end
return exp
