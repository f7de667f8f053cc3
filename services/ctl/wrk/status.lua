-- status.lua: a wrk script that reads registration status (exact positions)
-- with real queue tokens, cycling through a file of "itemId token" lines.
--
-- Make the file by registering users (the stack running: make run):
--   for i in $(seq 1000); do curl -s -XPOST http://127.0.0.1:8080/api/v1/items/concert-2026/registrations \
--     -d "{\"userId\":\"reader-$i\"}" | sed 's/.*"token":"\([^"]*\)".*/concert-2026 \1/'; done > /tmp/tokens.txt
-- then, with the stack running:
--   wrk -t2 -c64 -d20s -s services/ctl/wrk/status.lua http://127.0.0.1:8080 -- /tmp/tokens.txt

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   local file = args[1] or "/tmp/tokens.txt"
   paths = {}
   for line in io.lines(file) do
      local item, tok = line:match("^(%S+)%s+(%S+)$")
      if item then
         paths[#paths + 1] = "/api/v1/items/" .. item .. "/registrations/" .. tok
      end
   end
   if #paths == 0 then
      error("no tokens in " .. file)
   end
   i = math.random(1, #paths)
   bad = 0
end

function request()
   i = i % #paths + 1
   return wrk.format("GET", paths[i])
end

function response(status, headers, body)
   if status ~= 200 or not body:find('"position":', 1, true) then
      bad = bad + 1
   end
end

function done(summary, latency, requests)
   local p = function(q) return latency:percentile(q) / 1000 end
   io.write(string.format("status reads   %d in %.3fs: %.1f/s\n", summary.requests,
      summary.duration / 1e6, summary.requests / (summary.duration / 1e6)))
   local wrong = 0
   for _, t in ipairs(threads) do
      wrong = wrong + (t:get("bad") or 0)
   end
   io.write(string.format("errors         non-2xx/3xx=%d timeout=%d not-a-position=%d\n",
      summary.errors.status, summary.errors.timeout, wrong))
   io.write(string.format("latency        p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms\n", p(50), p(90), p(99), latency.max / 1000))
end
