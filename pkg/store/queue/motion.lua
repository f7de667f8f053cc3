-- motion: how an item's line moved, read-only (safe on replicas): what the api
-- answers repeated status reads from, once it knows a token's seq.
-- KEYS[1] wr:{item}:head      STRING highest seq admitted so far
-- KEYS[2] wr:{item}:waiting   ZSET tokenId scored by seq
-- KEYS[3] wr:{item}:admitted  ZSET tokenId scored by admission expiry (ms)
-- KEYS[4] wr:{item}:pace      HASH admission pace (sum60: admitted in the last minute)
-- KEYS[5] wr:{item}:paced     LIST "ms:n", oldest first: admissions of the last minute
-- Returns {head, waitingTotal, sum60, active, oldest "ms:n" of the pace or false}
return {tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('ZCARD', KEYS[2]),
  tonumber(redis.call('HGET', KEYS[4], 'sum60') or '0'), redis.call('ZCARD', KEYS[3]),
  redis.call('LINDEX', KEYS[5], 0)}
