-- register.lua: a wrk script that POSTs registrations to the waitroom API,
-- each with a userId no other request (of this run or another) has used:
--   wrk-<run>-<thread>-<counter>
-- where run is the start time in ms plus a random number, thread is wrk's
-- thread number and counter counts that thread's requests.
--
-- Usage (from the repo root, with the stack running: go run ./services/dev):
--   wrk -t2 -c64 -d20s -s services/ctl/wrk/register.lua http://127.0.0.1:8080
-- Another item than concert-2026:
--   wrk -t2 -c64 -d20s -s services/ctl/wrk/register.lua http://127.0.0.1:8080 -- sneaker-drop

local threads = {}
local next_id = 1
math.randomseed(os.time())
local run = string.format("%d%04d", os.time(), math.random(0, 9999))

-- setup runs in the main thread once per wrk thread, before it starts.
function setup(thread)
   thread:set("id", next_id)
   thread:set("run", run)
   next_id = next_id + 1
   table.insert(threads, thread)
end

-- init runs in each thread; args are what follows "--" on the command line.
function init(args)
   item = args[1] or "concert-2026"
   path = "/api/v1/items/" .. item .. "/registrations"
   headers = { ["Content-Type"] = "application/json" }
   count = 0
end

function request()
   count = count + 1
   local body = string.format('{"userId":"wrk-%s-%d-%d"}', run, id, count)
   return wrk.format("POST", path, headers, body)
end

-- done prints the percentiles the bench command prints, in milliseconds.
function done(summary, latency, requests)
   local sent = 0
   for _, t in ipairs(threads) do
      sent = sent + t:get("count")
   end
   local errors = summary.errors
   io.write(string.format("registrations  %d sent, %d completed in %.3fs: %.1f/s\n",
      sent, summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6)))
   io.write(string.format("errors         connect=%d read=%d write=%d timeout=%d non-2xx/3xx=%d\n",
      errors.connect, errors.read, errors.write, errors.timeout, errors.status))
   io.write(string.format("latency        p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms\n",
      latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3))
end
