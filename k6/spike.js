// spike.js: a ticket drop. VUs ramp from 0 to VUS in RAMP and hold for HOLD;
// each iteration is a new person who registers for one of ITEMS, waits for
// admission on SSE (or polls status when no notifier answers), then verifies
// and completes the admission token like an order service.
//
//   bin/k6 run k6/spike.js                                 # defaults below
//   VUS=50 RAMP=5s HOLD=10s bin/k6 run k6/spike.js         # the CI flavour
//
// env: BASE_URL (http://127.0.0.1:8080), EVENTS_URL (BASE_URL; the SSE URL is
// EVENTS_URL + the eventsUrl of the 202), ADMIN_URL (http://127.0.0.1:8082),
// ADMIN_TOKEN (dev-admin-token), VUS (200), RAMP (10s), HOLD (20s), ITEMS
// (concert-2026,sneaker-drop), ADMIT_TIMEOUT (60s), MODE (auto|sse|poll),
// ADMIT_RATE (500/s per item), MAX_ACTIVE (5000), SESSION_TTL (60 s),
// THINK (0s between a person's completion and the VU's next person), USE (0s: how
// long a person holds the admission before verify and complete),
// P95_202 (250 ms), P95_WAITING (1000 ms), P95_ADMISSION (2000 ms), RESULTS_DIR
// (bench/results): the thresholds are p(95) of time_to_202,
// time_to_waiting_visible and time_to_admission, in ms.
//
// Bounded: new iterations stop after RAMP + HOLD; an iteration still waiting
// gets ADMIT_TIMEOUT + 5 s more, then k6 stops it.
import { sleep } from 'k6';
import exec from 'k6/execution';
import * as wr from './lib/waitroom.js';

const VUS = Number(wr.env('VUS', '200'));
const RAMP = wr.env('RAMP', '10s');
const HOLD = wr.env('HOLD', '20s');
const THINK_MS = wr.ms(wr.env('THINK', '0s'));

export const options = wr.options({
  drop: {
    executor: 'ramping-vus',
    startVUs: 0,
    stages: [
      { duration: RAMP, target: VUS },
      { duration: HOLD, target: VUS },
    ],
    gracefulRampDown: '0s',
    gracefulStop: `${Math.ceil(wr.ADMIT_TIMEOUT_MS / 1000) + 5}s`,
  },
});

export function setup() {
  const runId = wr.prepare();
  const useSSE = wr.probeEvents();
  const before = wr.snapshot(wr.ITEMS);
  console.log(`spike ${runId}: ${VUS} VUs, ramp ${RAMP}, hold ${HOLD}, items ${wr.ITEMS}, policy ${JSON.stringify(wr.policySummary())}`);
  return { runId, before, useSSE };
}

export default function (data) {
  const it = wr.ITEMS[(exec.vu.idInTest + exec.vu.iterationInInstance) % wr.ITEMS.length];
  wr.journey(data.runId, it, 'spike', data.useSSE);
  if (THINK_MS > 0) sleep(THINK_MS / 1000);
}

export function teardown(data) {
  wr.ledger(data.before, wr.ITEMS);
}

export function handleSummary(data) {
  return wr.summary('spike', data, [`VUS ${VUS}, RAMP ${RAMP}, HOLD ${HOLD}, ITEMS ${wr.ITEMS.join(',')}, policy ${JSON.stringify(wr.policySummary())}`]);
}
