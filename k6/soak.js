// soak.js: steady load for a long while. Three scenarios run for DURATION:
//   flow       RATE new people per second (constant arrival rate), each the
//              spike's journey: register, wait for admission, verify, complete;
//   listeners  LISTENERS people queued on a paused item (LISTEN_ITEM) who keep
//              an SSE stream open the whole time (or poll status every
//              LISTEN_POLL when no notifier answers), checking they stay WAITING;
//   monitor    one VU reading the stack's /metrics every MONITOR_EVERY: RSS,
//              heap in use and goroutines of the dev process, so memory is seen
//              to stay flat (or not).
// At the end teardown counts, on the server, what the run did to each item:
// registered = admitted + still waiting (+ lost, which must be 0), and the
// summary compares it with the 202s k6 counted.
//
//   bin/k6 run k6/soak.js                          # 10 minutes at 50/s
//   DURATION=30s bin/k6 run k6/soak.js             # the CI flavour
//
// env: everything spike.js reads (BASE_URL, EVENTS_URL, ADMIN_URL,
// ADMIN_TOKEN, ITEMS, ADMIT_TIMEOUT, MODE, ADMIT_RATE, MAX_ACTIVE,
// SESSION_TTL, P95_202, P95_WAITING, P95_ADMISSION, RESULTS_DIR) and DURATION (10m), RATE
// (50 registrations/s), LISTENERS (50), LISTEN_ITEM (soak-listeners),
// LISTEN_POLL (2s), MONITOR_EVERY (5s), MAX_VUS (RATE*10),
// MAX_RSS_GROWTH (unset: report only; e.g. 1.5 fails the run when the last
// RSS exceeds 1.5x the RSS after warm-up).
import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Gauge, Rate } from 'k6/metrics';
import sse from 'k6/x/sse';
import * as wr from './lib/waitroom.js';

const DURATION = wr.env('DURATION', '10m');
const DURATION_MS = wr.ms(DURATION);
const RATE = Number(wr.env('RATE', '50'));
const LISTENERS = Number(wr.env('LISTENERS', '50'));
const LISTEN_ITEM = wr.env('LISTEN_ITEM', 'soak-listeners');
const LISTEN_POLL_MS = wr.ms(wr.env('LISTEN_POLL', '2s'));
const MONITOR_EVERY_MS = wr.ms(wr.env('MONITOR_EVERY', '5s'));
const MAX_VUS = Number(wr.env('MAX_VUS', String(Math.max(50, RATE * 10))));
const MAX_RSS_GROWTH = wr.env('MAX_RSS_GROWTH', '');
const GRACE = `${Math.ceil(wr.ADMIT_TIMEOUT_MS / 1000) + 5}s`;
const LEDGER_ITEMS = LISTENERS > 0 ? wr.ITEMS.concat([LISTEN_ITEM]) : wr.ITEMS;

const listenerOK = new Rate('listener_ok'); // each status or event a listener saw: still WAITING
const listenerEvents = new Counter('listener_events');
const rss = new Gauge('stack_rss_bytes');
const heap = new Gauge('stack_heap_inuse_bytes');
const goroutines = new Gauge('stack_goroutines');
const rssBaseline = new Gauge('stack_rss_baseline_bytes');
const rssGrowth = new Gauge('stack_rss_growth');

const scenarios = {
  flow: {
    executor: 'constant-arrival-rate',
    rate: RATE,
    timeUnit: '1s',
    duration: DURATION,
    preAllocatedVUs: Math.max(10, RATE * 4), // a stall of a few seconds must not drop arrivals
    maxVUs: MAX_VUS,
    gracefulStop: GRACE,
    exec: 'flow',
  },
  monitor: {
    executor: 'constant-vus',
    vus: 1,
    duration: DURATION,
    gracefulStop: '5s',
    exec: 'monitor',
  },
};
if (LISTENERS > 0) {
  scenarios.listeners = {
    executor: 'constant-vus',
    vus: LISTENERS,
    duration: DURATION,
    gracefulStop: '10s',
    exec: 'listen',
  };
}

export const options = wr.options(
  scenarios,
  Object.assign(
    { listener_ok: ['rate>0.99'] },
    MAX_RSS_GROWTH ? { stack_rss_growth: [`value<${Number(MAX_RSS_GROWTH)}`] } : {},
  ),
);

export function setup() {
  const runId = wr.prepare();
  if (LISTENERS > 0) {
    wr.ensureItem(LISTEN_ITEM, 'soak: a paused line that listeners wait in');
    wr.setPolicy(LISTEN_ITEM, { paused: true });
  }
  const useSSE = wr.probeEvents();
  const before = wr.snapshot(LEDGER_ITEMS);
  console.log(`soak ${runId}: ${DURATION} at ${RATE}/s over ${wr.ITEMS}, ${LISTENERS} listeners on ${LISTEN_ITEM}, policy ${JSON.stringify(wr.policySummary())}`);
  return { runId, before, useSSE };
}

export function flow(data) {
  const it = wr.ITEMS[exec.scenario.iterationInTest % wr.ITEMS.length];
  wr.journey(data.runId, it, 'soak', data.useSSE);
}

// A listener registers once, on its first iteration, then listens until the
// scenario ends; its registration stays WAITING in the paused line.
let listener = null;

function scenarioEnd() {
  return exec.scenario.startTime + DURATION_MS;
}

function registerListener(data) {
  const deadline = Date.now() + 10000; // the api learns the new item from the items topic
  while (Date.now() < deadline) {
    const reg = wr.register(LISTEN_ITEM, wr.userId(data.runId, 'listener'));
    if (reg) return reg;
    sleep(0.5);
  }
  return null;
}

export function listen(data) {
  if (listener === null) {
    listener = registerListener(data);
    if (listener === null) {
      listenerOK.add(0);
      sleep(Math.max(0, scenarioEnd() - Date.now()) / 1000);
      return;
    }
  }
  const end = scenarioEnd();
  if (end - Date.now() < 100) {
    // The executor's clock runs a hair behind ours: wait out the end rather
    // than spin through empty iterations.
    sleep(1);
    return;
  }
  if (data.useSSE) {
    let lastEventId = '';
    while (end - Date.now() > 100) {
      const res = sse.listen(wr.EVENTS_URL + listener.body.eventsUrl, {
        timeout: end - Date.now(),
        until: wr.TERMINAL,
        lastEventId,
        tags: { item: LISTEN_ITEM, scenario_role: 'listener' },
      });
      for (const e of res.events) {
        listenerEvents.add(1, { event: e.name });
        if (e.name === 'position') listener.waiting = true;
        // pending: not in the line yet (the consumer has not applied it), fine until the first position.
        if (e.name !== 'pending' || listener.waiting) listenerOK.add(e.name === 'position' ? 1 : 0);
      }
      if (res.reason === 'timeout' || res.reason === 'interrupted') return;
      if (res.reason === 'until' || (res.status !== 200 && res.status !== 0)) {
        console.warn(`listener ${exec.vu.idInTest}: ${res.reason} ${res.status} ${res.error || ''} ${res.last ? res.last.name : ''}`);
        listenerOK.add(0);
        sleep(1);
      }
      lastEventId = res.lastEventId || lastEventId;
      wr.metrics.sseReconnects.add(1);
      sleep(0.2);
    }
    return;
  }
  while (end - Date.now() > LISTEN_POLL_MS) {
    const res = http.get(wr.BASE_URL + listener.body.statusUrl, { tags: { name: 'status' } });
    let body = null;
    try {
      body = res.json();
    } catch (e) {
      body = null;
    }
    if (res.status === 200 && body && body.status === 'PENDING' && !listener.waiting) {
      sleep(0.05); // not in the line yet: the consumer has not applied it
      continue;
    }
    listener.waiting = true;
    const ok = check(res, { 'listener: still WAITING': (r) => r.status === 200 && !!body && body.status === 'WAITING' });
    listenerOK.add(ok ? 1 : 0);
    listenerEvents.add(1);
    sleep(LISTEN_POLL_MS / 1000);
  }
  sleep(Math.max(0, end - Date.now()) / 1000);
}

// The monitor keeps its samples in its own VU (one VU, so one array).
const mon = { baseline: 0 };

function gauge(text, name) {
  const m = text.match(new RegExp(`^${name} ([0-9.e+]+)$`, 'm'));
  return m ? Number(m[1]) : undefined;
}

export function monitor() {
  const res = http.get(`${wr.BASE_URL}/metrics`, { tags: { name: 'metrics' } });
  if (res.status === 200) {
    const r = gauge(res.body, 'process_resident_memory_bytes');
    const h = gauge(res.body, 'go_memstats_heap_inuse_bytes');
    const g = gauge(res.body, 'go_goroutines');
    if (r !== undefined) rss.add(r);
    if (h !== undefined) heap.add(h);
    if (g !== undefined) goroutines.add(g);
    // The baseline is the first sample after a fifth of the run (at least
    // 5 s): start-up and the first burst are not the steady state.
    const warm = Date.now() - exec.scenario.startTime >= Math.max(5000, DURATION_MS / 5);
    if (r !== undefined && warm && !mon.baseline) {
      mon.baseline = r;
      rssBaseline.add(r);
    }
    if (r !== undefined && mon.baseline) rssGrowth.add(r / mon.baseline);
  }
  const left = scenarioEnd() - Date.now();
  sleep(left < 100 ? 1 : Math.min(MONITOR_EVERY_MS, left - 100) / 1000);
}

export function teardown(data) {
  wr.ledger(data.before, LEDGER_ITEMS);
}

function mib(v) {
  return v === undefined ? '-' : `${(v / 1048576).toFixed(1)} MiB`;
}

export function handleSummary(data) {
  const g = (n, k) => (data.metrics[n] && data.metrics[n].values ? data.metrics[n].values[k] : undefined);
  const lines = [
    `DURATION ${DURATION}, RATE ${RATE}/s, ITEMS ${wr.ITEMS.join(',')}, LISTENERS ${LISTENERS} on ${LISTEN_ITEM}, policy ${JSON.stringify(wr.policySummary())}`,
    `memory of the dev process (every service, embedded Kafka; not redis-server): RSS after warm-up ${mib(g('stack_rss_baseline_bytes', 'value'))}, ` +
      `at the end ${mib(g('stack_rss_bytes', 'value'))} (min ${mib(g('stack_rss_bytes', 'min'))}, max ${mib(g('stack_rss_bytes', 'max'))}), ` +
      `growth x${(g('stack_rss_growth', 'value') || 0).toFixed(2)}; heap in use at the end ${mib(g('stack_heap_inuse_bytes', 'value'))} ` +
      `(max ${mib(g('stack_heap_inuse_bytes', 'max'))}); goroutines ${g('stack_goroutines', 'value')} (max ${g('stack_goroutines', 'max')})`,
    `listeners: ${g('listener_events', 'count') || 0} ${data.setup_data && data.setup_data.useSSE ? 'events' : 'status polls'}, ` +
      `still WAITING ${((g('listener_ok', 'rate') || 0) * 100).toFixed(2)}%; dropped iterations ${g('dropped_iterations', 'count') || 0}`,
  ];
  return wr.summary('soak', data, lines);
}
