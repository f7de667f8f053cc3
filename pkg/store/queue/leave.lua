-- leave: apply one leave record of waitroom.registrations: the user's place is gone.
-- KEYS[1] wr:{item}:applied   HASH partition -> highest applied offset (replay guard)
-- KEYS[2] wr:{item}:users     HASH place key -> tokenId ("!L"..tokenId once the place was
--                             left, "!C"..tokenId once the admission was completed)
-- KEYS[3] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[4] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[5] wr:{item}:pool      ZSET pre-queued tokenIds (not drawn yet)
-- KEYS[6] wr:{item}:late      ZSET tokenIds queued behind a pending draw
-- KEYS[7] wr:{item}:changes   STRING changes of the line (the prelude's changed)
-- ARGV[1] partition  ARGV[2] offset  ARGV[3] tokenId  ARGV[4] place key
-- Returns {outcome, 0, tokenId}: LEFT with the tokenId removed; NOT_IN_LINE when the
-- token holds no place (another token of the same key holds it: it stays);
-- REPLAY when the offset was applied before.
-- Every key is read (and so type-checked) before the first write, and the
-- applied offset is written last.
if replayed(KEYS[1], ARGV[1], ARGV[2]) then
  return {'REPLAY', 0, ''}
end
local cur = redis.call('HGET', KEYS[2], ARGV[4])
if cur ~= ARGV[3] then
  changed(KEYS[7])
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return {'NOT_IN_LINE', 0, ''}
end
-- Every set is read (and so type-checked) before the first write; the place
-- is removed from the sets that hold it (one, but for a corrupt line).
local held = {}
for k = 3, 6 do
  if redis.call('ZSCORE', KEYS[k], cur) then
    held[#held + 1] = KEYS[k]
  end
end
for _, key in ipairs(held) do
  redis.call('ZREM', key, cur)
end
redis.call('HSET', KEYS[2], ARGV[4], '!L' .. cur)
changed(KEYS[7])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {'LEFT', 0, cur}
