-- steer: store (or clear) the steering controller's effective target of an
-- item, which promote admits within, unless a newer leader has taken the item.
-- KEYS[1] wr:{item}:pace   HASH steerRate, steerCap (promote reads them), steerAt (ms)
-- KEYS[2] wr:{item}:epoch  STRING highest leader epoch seen (the fence)
-- ARGV[1] epoch of the caller (0: a rebuild, which is not fenced)
-- ARGV[2] rate ('' clears: the item runs on its policy alone)  ARGV[3] cap  ARGV[4] at (ms)
-- Returns 1 when stored, 0 when fenced.
local epoch = tonumber(ARGV[1])
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if not seen then
  return redis.error_reply('ERR corrupt ' .. KEYS[2] .. ': not a number')
end
if epoch > 0 and epoch < seen then
  return 0
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'steerRate', 'steerCap', 'steerAt')
  return 1
end
redis.call('HSET', KEYS[1], 'steerRate', ARGV[2], 'steerCap', ARGV[3], 'steerAt', ARGV[4])
return 1
