-- steer: store the steering controller's decision for an item: always as the
-- last decision (the console shows why the target moved), and as the
-- effective target promote admits within only when it applies, unless a
-- newer leader has taken the item.
-- KEYS[1] wr:{item}:pace   HASH steerRate, steerHead (promote reads them), steerAt (ms), steerLast (JSON)
-- KEYS[2] wr:{item}:epoch  STRING highest leader epoch seen (the fence)
-- ARGV[1] epoch of the caller (0: a rebuild, which is not fenced)
-- ARGV[2] rate ('': the decision does not apply; the item runs on its policy alone)
-- ARGV[3] head limit (the seq past which nobody is admitted)  ARGV[4] at (ms)  ARGV[5] the decision (JSON)
-- Returns 1 when stored, 0 when fenced.
local epoch = tonumber(ARGV[1])
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if not seen then
  return redis.error_reply('ERR corrupt ' .. KEYS[2] .. ': not a number')
end
if epoch > 0 and epoch < seen then
  return 0
end
redis.call('HSET', KEYS[1], 'steerLast', ARGV[5], 'steerAt', ARGV[4])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'steerRate', 'steerHead')
  return 1
end
redis.call('HSET', KEYS[1], 'steerRate', ARGV[2], 'steerHead', ARGV[3])
return 1
