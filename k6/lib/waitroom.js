// waitroom.js: what spike.js and soak.js share: the environment, the custom
// metrics, one user's journey (register → wait for admission over SSE or by
// polling status → verify → complete), the admin calls of setup/teardown, the
// ledger that counts every registration, and the summary files.
import http from 'k6/http';
import { check, sleep, fail } from 'k6';
import exec from 'k6/execution';
import { Counter, Rate, Trend, Gauge } from 'k6/metrics';
import sse from 'k6/x/sse';

// ---- environment -----------------------------------------------------------

export function env(name, def) {
  const v = __ENV[name];
  return v === undefined || v === '' ? def : v;
}

// ms parses "500ms", "10s", "1m30s", "2h" or a bare number of milliseconds.
export function ms(v) {
  if (typeof v === 'number') return v;
  const s = String(v).trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 1, s: 1000, m: 60000, h: 3600000 };
  let total = 0;
  let used = 0;
  let m;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * unit[m[2]];
    used += m[0].length;
  }
  if (used !== s.length || used === 0) throw new Error(`not a duration: "${v}"`);
  return total;
}

export const BASE_URL = env('BASE_URL', 'http://127.0.0.1:8080');
export const EVENTS_URL = env('EVENTS_URL', BASE_URL);
export const ADMIN_URL = env('ADMIN_URL', 'http://127.0.0.1:8082');
export const ADMIN_TOKEN = env('ADMIN_TOKEN', 'dev-admin-token');
export const ITEMS = env('ITEMS', 'concert-2026,sneaker-drop').split(',').map((s) => s.trim()).filter((s) => s);
export const ADMIT_TIMEOUT_MS = ms(env('ADMIT_TIMEOUT', '60s'));
// MODE: auto (SSE, polling status when no notifier answers), sse (SSE only:
// no notifier is an error), poll (status only).
export const MODE = env('MODE', 'auto');
// POLL: status polling while WAITING; unset, the answer's pollAfterMs (the
// server's pace: rarer far back in the line), else 500 ms.
const POLL_SET = env('POLL', '') !== '';
const POLL_MS = ms(env('POLL', '500ms'));
// USE: how long a person holds the admission (shopping) before the order
// service verifies and completes it; 0 completes at once. With a small
// MAX_ACTIVE it keeps the admitted set full, so places free at the pace
// admissions end rather than at the item's rate.
const USE_MS = ms(env('USE', '0s'));
const PENDING_POLL_MS = ms(env('PENDING_POLL', '50ms')); // while PENDING, so WAITING is seen promptly
const MAX_RECONNECTS = 5;
export const RESULTS_DIR = env('RESULTS_DIR', 'bench/results');
// The admission policy setup() gives the items, so the line moves at the
// rate under test rather than the demo's 5/s.
const POLICY = {
  ratePerSecond: Number(env('ADMIT_RATE', '500')),
  maxActive: Number(env('MAX_ACTIVE', '5000')),
  sessionTTLSeconds: Number(env('SESSION_TTL', '60')),
};
// The notifier's terminal events; before them it sends `pending` (not in the
// line yet) and `position`.
export const TERMINAL = ['admitted', 'sold_out', 'closed', 'expired', 'left', 'completed', 'rejected'];
const TERMINAL_STATUS = ['ADMITTED', 'SOLD_OUT', 'CLOSED', 'EXPIRED', 'LEFT', 'COMPLETED', 'REJECTED'];

if (['auto', 'sse', 'poll'].indexOf(MODE) < 0) throw new Error(`MODE must be auto, sse or poll, not ${MODE}`);
if (ITEMS.length === 0) throw new Error('ITEMS is empty');

// ---- metrics ---------------------------------------------------------------

export const metrics = {
  timeTo202: new Trend('time_to_202', true),
  timeToWaiting: new Trend('time_to_waiting_visible', true),
  timeToAdmission: new Trend('time_to_admission', true),
  registered: new Counter('registered'),
  admitted: new Counter('admitted'),
  completed: new Counter('completed'),
  admissionSuccess: new Rate('admission_success'),
  stepErrors: new Counter('step_errors'),
  admittedVia: new Counter('admitted_via'),
  // The ETA first shown (the first position event, or the first WAITING
  // status) against the time admission really took from then.
  etaAbsError: new Trend('eta_abs_error', true),
  etaErrorPct: new Trend('eta_error_pct'),
  sseReconnects: new Counter('sse_reconnects'),
  ledgerRegistered: new Gauge('ledger_registered'),
  ledgerAdmitted: new Gauge('ledger_admitted'),
  ledgerWaiting: new Gauge('ledger_waiting'),
  ledgerLost: new Gauge('ledger_lost'),
};

export const STEPS = ['register', 'sse', 'status', 'admission', 'verify', 'complete'];

function stepError(step, detail) {
  metrics.stepErrors.add(1, { step });
  if (detail) console.warn(`${step}: ${detail}`);
}

// submetricThresholds makes k6 keep the tagged submetrics in the summary data;
// the conditions always hold.
function submetricThresholds(scenarios) {
  const t = {};
  for (const s of scenarios || []) t[`iteration_duration{scenario:${s}}`] = ['max>=0'];
  for (const s of STEPS) t[`step_errors{step:${s}}`] = ['count>=0'];
  for (const v of ['sse', 'poll']) t[`admitted_via{via:${v}}`] = ['count>=0'];
  for (const n of ['register', 'status', 'verify', 'complete']) t[`http_req_duration{name:${n}}`] = ['max>=0'];
  return t;
}

const trendStats = ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)', 'count'];

// The thresholds both scripts hold, in ms for the p(95)s. The defaults are for
// this 2-core machine with k6 and the whole stack on it (see k6/README.md).
const P95_202 = Number(env('P95_202', '250'));
const P95_WAITING = Number(env('P95_WAITING', '1000'));
const P95_ADMISSION = Number(env('P95_ADMISSION', '2000'));

// options are k6's options for scenarios: the shared thresholds (plus
// extra), the summary's trend columns and the setup/teardown limits.
export function options(scenarios, extra) {
  const thresholds = Object.assign(
    {
      http_req_failed: ['rate<0.01'],
      time_to_202: [`p(95)<${P95_202}`],
      time_to_waiting_visible: [`p(95)<${P95_WAITING}`],
      time_to_admission: [`p(95)<${P95_ADMISSION}`],
      admission_success: ['rate>0.99'],
      checks: ['rate>0.99'],
      ledger_lost: ['value==0'],
    },
    submetricThresholds(Object.keys(scenarios)),
    extra || {},
  );
  return { scenarios, thresholds, summaryTrendStats: trendStats, setupTimeout: '60s', teardownTimeout: '60s' };
}

// prepare gives each of ITEMS the admission policy under test; setup() calls it.
export function prepare() {
  for (const it of ITEMS) setPolicy(it);
  return Date.now().toString(36); // the run's id, in every userId
}

// ---- one user ----------------------------------------------------------------

const jsonHeaders = { 'Content-Type': 'application/json' };

function json(res) {
  try {
    return res.json();
  } catch (e) {
    return null;
  }
}

// userId is unique per run, VU and iteration: every iteration is a new person.
export function userId(runId, prefix) {
  return `${prefix}-${runId}-${exec.vu.idInTest}-${exec.vu.iterationInInstance}`;
}

// register POSTs a registration and returns {t0, body} or null.
export function register(item, user) {
  const t0 = Date.now();
  const res = http.post(`${BASE_URL}/api/v1/items/${item}/registrations`, JSON.stringify({ userId: user }), {
    headers: jsonHeaders,
    tags: { name: 'register' },
  });
  const body = json(res);
  const ok = check(res, {
    'register: 202': (r) => r.status === 202,
    'register: token and urls': () => !!(body && body.token && body.statusUrl && body.eventsUrl),
  });
  if (!ok) {
    stepError('register', `${item}: ${res.status} ${String(res.body).slice(0, 200)}`);
    return null;
  }
  metrics.timeTo202.add(res.timings.duration + res.timings.blocked + res.timings.connecting, { item });
  metrics.registered.add(1, { item });
  return { t0, body };
}

// probeEvents tells whether a notifier answers on EVENTS_URL: a forged token
// on a real item gets 401/403 from a notifier, and 404 or a refused
// connection where none runs. setup() calls it once; MODE=sse requires one.
export function probeEvents() {
  if (MODE === 'poll') return false;
  const url = `${EVENTS_URL}/api/v1/items/${ITEMS[0]}/registrations/probe/events`;
  const res = sse.listen(url, { timeout: '5s', maxEvents: 1, tags: { probe: 'true' } });
  const up = res.status !== 0 && res.status !== 404;
  const why = res.status ? `status ${res.status}` : String(res.error).replace(/^.*: /, '');
  if (!up && MODE === 'sse') fail(`MODE=sse but no notifier answers at ${EVENTS_URL} (${why})`);
  console.log(up ? `notifier at ${EVENTS_URL} (probe: ${why}): VUs listen on SSE` : `no notifier at ${EVENTS_URL} (${why}): VUs poll status every ${POLL_MS} ms`);
  return up;
}

// Per VU: once the events URL answers 404 or refuses the connection, there is
// no notifier; MODE=auto polls status from then on.
let sseUnavailable = false;

// waitAdmission waits until the registration is admitted or deadline (a
// Date.now() value) passes, on SSE when useSSE, else by polling status. It
// returns {admissionToken} or {outcome} when it ended otherwise (a terminal
// state, a timeout, an error).
export function waitAdmission(reg, item, deadline, useSSE) {
  const st = { waitingSeen: false, eta: undefined, etaAt: 0 };
  if (!useSSE || MODE === 'poll' || (MODE === 'auto' && sseUnavailable)) return pollAdmission(reg, item, deadline, st);
  const url = EVENTS_URL + reg.body.eventsUrl;
  let lastEventId = '';
  for (let attempt = 0; attempt <= MAX_RECONNECTS; attempt++) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    const res = sse.listen(url, {
      timeout: left,
      until: TERMINAL,
      lastEventId,
      tags: { item },
      onEvent: (e) => {
        if (e.name === 'position' && !st.waitingSeen) {
          st.waitingSeen = true;
          metrics.timeToWaiting.add(e.at - reg.t0, { item, via: 'sse' });
        }
        if (e.name === 'position' && st.eta === undefined) {
          let p = null;
          try {
            p = JSON.parse(e.data);
          } catch (err) {
            p = null;
          }
          if (p && typeof p.etaSeconds === 'number') noteEta(st, p.etaSeconds, e.at);
        }
      },
    });
    if (res.events.length === 0 && attempt === 0 && (res.status === 404 || res.reason === 'error')) {
      if (MODE === 'auto') {
        sseUnavailable = true;
        console.warn(`VU ${exec.vu.idInTest}: the notifier stopped answering (${res.status || String(res.error).replace(/^.*: /, '')}); polling status`);
        return pollAdmission(reg, item, deadline, st);
      }
      stepError('sse', `open ${res.status} ${res.error}`);
      return { outcome: 'sse_error' };
    }
    if (res.reason === 'until') {
      const last = res.last;
      if (last.name !== 'admitted') return { outcome: last.name };
      let data = null;
      try {
        data = JSON.parse(last.data);
      } catch (e) {
        data = null;
      }
      metrics.timeToAdmission.add(last.at - reg.t0, { item, via: 'sse' });
      scoreEta(st, last.at, item);
      metrics.admittedVia.add(1, { via: 'sse' });
      if (data && data.admissionToken) return { admissionToken: data.admissionToken };
      // An admitted event without the token: the status has it.
      const s = http.get(BASE_URL + reg.body.statusUrl, { tags: { name: 'status' } });
      const body = json(s);
      if (s.status === 200 && body && body.admissionToken) return { admissionToken: body.admissionToken };
      stepError('sse', `admitted event without a token (${last.data}), status ${s.status}`);
      return { outcome: 'admitted_without_token' };
    }
    if (res.reason === 'timeout') break;
    if (res.reason === 'interrupted') return { outcome: 'interrupted' };
    if (res.status !== 200 && res.status !== 0) {
      stepError('sse', `${res.status} ${res.error} ${res.body || ''}`);
      return { outcome: 'sse_error' };
    }
    // The stream ended or broke before a terminal event: resume where it was.
    metrics.sseReconnects.add(1);
    lastEventId = res.lastEventId;
    sleep(Math.min(res.retry || 200, 1000) / 1000);
  }
  return { outcome: 'timeout' };
}

function noteEta(st, eta, at) {
  st.eta = eta;
  st.etaAt = at;
}

// scoreEta records how far the first ETA was from the wait it announced:
// the absolute error for everyone, the relative one (in %) for waits of a
// second or more (below that the ETA's whole seconds and the scheduler's
// tick dominate).
function scoreEta(st, admittedAt, item) {
  if (st.eta === undefined) return;
  const actual = admittedAt - st.etaAt;
  const err = Math.abs(actual - st.eta * 1000);
  metrics.etaAbsError.add(err, { item });
  if (actual >= 1000) metrics.etaErrorPct.add((100 * err) / actual, { item });
}

function pollAdmission(reg, item, deadline, st) {
  const url = BASE_URL + reg.body.statusUrl;
  let cursor = ''; // the last WAITING answer's: no api replica tells a larger position
  while (Date.now() < deadline) {
    const res = http.get(cursor ? `${url}?cursor=${encodeURIComponent(cursor)}` : url, { tags: { name: 'status' } });
    const now = Date.now();
    const body = json(res);
    if (body && body.cursor) cursor = body.cursor;
    if (res.status !== 200 || !body) {
      stepError('status', `${res.status} ${String(res.body).slice(0, 200)}`);
      sleep(POLL_MS / 1000);
      continue;
    }
    if (body.status === 'WAITING' && !st.waitingSeen) {
      st.waitingSeen = true;
      metrics.timeToWaiting.add(now - reg.t0, { item, via: 'poll' });
    }
    if (body.status === 'WAITING' && st.eta === undefined && typeof body.etaSeconds === 'number') noteEta(st, body.etaSeconds, now);
    if (body.status === 'ADMITTED') {
      metrics.timeToAdmission.add(now - reg.t0, { item, via: 'poll' });
      scoreEta(st, now, item);
      metrics.admittedVia.add(1, { via: 'poll' });
      return { admissionToken: body.admissionToken };
    }
    if (TERMINAL_STATUS.indexOf(body.status) >= 0) return { outcome: body.status.toLowerCase() };
    let wait = body.status === 'PENDING' ? PENDING_POLL_MS : POLL_MS;
    if (body.status !== 'PENDING' && !POLL_SET && body.pollAfterMs > 0) wait = body.pollAfterMs;
    sleep(wait / 1000);
  }
  return { outcome: 'timeout' };
}

// admissionCall is what an order service does with an admission token.
function admissionCall(kind, token, item) {
  const res = http.post(`${BASE_URL}/api/v1/admissions/${kind}`, JSON.stringify({ token, itemId: item }), {
    headers: jsonHeaders,
    tags: { name: kind },
  });
  const body = json(res);
  const ok = check(res, {
    [`${kind}: 200`]: (r) => r.status === 200,
    [`${kind}: ${kind === 'verify' ? 'valid' : 'COMPLETED'}`]: () =>
      !!body && (kind === 'verify' ? body.valid === true : body.status === 'COMPLETED'),
  });
  if (!ok) stepError(kind, `${item}: ${res.status} ${String(res.body).slice(0, 200)}`);
  return ok;
}

// journey is one person: register for item, wait, verify, complete. It
// records admission_success once per registration that got its 202, unless
// the test ended while the person was still waiting.
export function journey(runId, item, prefix, useSSE) {
  const reg = register(item, userId(runId, prefix));
  if (!reg) return;
  const w = waitAdmission(reg, item, reg.t0 + ADMIT_TIMEOUT_MS, useSSE);
  if (w.outcome === 'interrupted') return;
  if (!w.admissionToken) {
    stepError('admission', `${item}: ${w.outcome}`);
    metrics.admissionSuccess.add(0, { item });
    return;
  }
  metrics.admitted.add(1, { item });
  if (USE_MS > 0) sleep(USE_MS / 1000);
  const ok = admissionCall('verify', w.admissionToken, item) && admissionCall('complete', w.admissionToken, item);
  if (ok) metrics.completed.add(1, { item });
  metrics.admissionSuccess.add(ok ? 1 : 0, { item });
}

// ---- admin: policy and ledger --------------------------------------------------

const adminHeaders = { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' };

export function adminItem(item) {
  const res = http.get(`${ADMIN_URL}/internal/admin/v1/items/${item}`, { headers: adminHeaders, tags: { name: 'admin' } });
  if (res.status !== 200) fail(`admin GET ${item}: ${res.status} ${res.body}`);
  return res.json();
}

function adminWrite(method, path, body) {
  for (let i = 0; i < 10; i++) {
    const res = http.request(method, `${ADMIN_URL}/internal/admin/v1/items/${path}`, JSON.stringify(body), {
      headers: adminHeaders,
      tags: { name: 'admin' },
    });
    if (res.status === 200) return res.json();
    if (res.status !== 409 && res.status !== 503) fail(`admin ${method} ${path}: ${res.status} ${res.body}`);
    sleep(0.5);
  }
  fail(`admin ${method} ${path}: no success after 10 tries`);
}

// setPolicy gives item the admission policy (POLICY unless given).
export function setPolicy(item, policy) {
  return adminWrite('PUT', `${item}/admission`, policy || POLICY);
}

// ensureItem creates item (or updates it) as enabled with unlimited stock.
export function ensureItem(item, name) {
  return adminWrite('POST', item, { name, stock: -1, enabled: true });
}

export function policySummary() {
  return POLICY;
}

// snapshot reads each item's counters: seq (registrations accepted into the
// line), head (the highest sequence admitted: with FIFO and no leaves,
// everyone up to it was admitted), waiting.
export function snapshot(items) {
  const out = {};
  for (const it of items) {
    const v = adminItem(it);
    out[it] = { seq: v.seq, head: v.head, waiting: v.waiting, admitted: v.admitted };
  }
  return out;
}

// ledger waits until the line settles (no registration still on its way
// from Kafka to Redis, seq unchanged for a second), then counts what the run
// did to each item: registered = admitted + still waiting + lost. lost must be
// 0; the k6 side (202s counted) is compared with registered in handleSummary.
// It records ledger_* gauges and returns the counts.
export function ledger(before, items, settleMs) {
  const until = Date.now() + (settleMs || 15000);
  let prev = null;
  let cur = snapshot(items);
  while (Date.now() < until) {
    const balanced = items.every((it) => cur[it].seq - before[it].seq === cur[it].head - before[it].head + cur[it].waiting - before[it].waiting);
    const still = prev && items.every((it) => prev[it].seq === cur[it].seq);
    if (balanced && still) break;
    sleep(1);
    prev = cur;
    cur = snapshot(items);
  }
  const out = { items: {}, registered: 0, admitted: 0, waiting: 0, lost: 0 };
  for (const it of items) {
    const r = cur[it].seq - before[it].seq;
    const a = cur[it].head - before[it].head;
    const w = cur[it].waiting - before[it].waiting;
    out.items[it] = { registered: r, admitted: a, waiting: w, lost: r - a - w, admittedLive: cur[it].admitted };
    out.registered += r;
    out.admitted += a;
    out.waiting += w;
    out.lost += r - a - w;
  }
  metrics.ledgerRegistered.add(out.registered);
  metrics.ledgerAdmitted.add(out.admitted);
  metrics.ledgerWaiting.add(out.waiting);
  metrics.ledgerLost.add(out.lost);
  console.log(`ledger: ${JSON.stringify(out)}`);
  return out;
}

// ---- summary -------------------------------------------------------------------

function fmtMs(v) {
  if (v === undefined || v === null) return '-';
  if (v >= 1000) return `${(v / 1000).toFixed(2)}s`;
  return `${v.toFixed(1)}ms`;
}

function pad(s, n) {
  s = String(s);
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}

function val(data, name, key) {
  const m = data.metrics[name];
  return m && m.values ? m.values[key] : undefined;
}

// ledgerVerdict compares the 202s k6 counted with what the line holds.
function ledgerVerdict(data) {
  const counted = val(data, 'registered', 'count') || 0;
  const reg = val(data, 'ledger_registered', 'value');
  if (reg === undefined) return { ok: null, text: 'ledger: not taken (teardown did not run)' };
  const admitted = val(data, 'ledger_admitted', 'value');
  const waiting = val(data, 'ledger_waiting', 'value');
  const lost = val(data, 'ledger_lost', 'value');
  const ok = counted === reg && lost === 0;
  return {
    ok,
    counted202: counted,
    registered: reg,
    admitted,
    waiting,
    lost,
    text:
      `ledger: ${counted} registrations got 202; the line holds ${reg} = ${admitted} admitted + ${waiting} still waiting` +
      ` + ${lost} lost → ${ok ? 'OK, every registration is admitted or still waiting' : 'MISMATCH'}`,
  };
}

// summary writes <dir>/<name>.json (k6's data plus the ledger verdict) and
// <name>.txt, and prints the text.
export function summary(name, data, extraLines) {
  const lines = [];
  const started = new Date(Date.now() - data.state.testRunDurationMs).toISOString();
  lines.push(`waitroom ${name}: ${started}, ${(data.state.testRunDurationMs / 1000).toFixed(1)}s, BASE_URL ${BASE_URL}, EVENTS_URL ${EVENTS_URL}, MODE ${MODE}`);
  for (const l of extraLines || []) lines.push(l);
  lines.push('');
  lines.push(`${pad('trend', 42)}${pad('count', 8)}${pad('p50', 10)}${pad('p90', 10)}${pad('p95', 10)}${pad('p99', 10)}${pad('max', 10)}`);
  const trends = ['time_to_202', 'time_to_waiting_visible', 'time_to_admission', 'eta_abs_error', 'sse_time_to_first_event',
    'http_req_duration{name:register}', 'http_req_duration{name:status}', 'http_req_duration{name:verify}',
    'http_req_duration{name:complete}'];
  for (const n of Object.keys(data.metrics).sort()) {
    if (n.indexOf('iteration_duration{scenario:') === 0) trends.push(n);
  }
  for (const t of trends) {
    const m = data.metrics[t];
    if (!m || !m.values || !m.values.count) continue;
    const v = m.values;
    lines.push(`${pad(t, 42)}${pad(v.count, 8)}${pad(fmtMs(v.med), 10)}${pad(fmtMs(v['p(90)']), 10)}${pad(fmtMs(v['p(95)']), 10)}${pad(fmtMs(v['p(99)']), 10)}${pad(fmtMs(v.max), 10)}`);
  }
  const ep = data.metrics.eta_error_pct;
  if (ep && ep.values && ep.values.count) {
    lines.push(`eta: first ETA shown vs the wait it announced, waits >= 1 s: ${ep.values.count} admissions, ` +
      `error median ${ep.values.med.toFixed(1)}%, p90 ${ep.values['p(90)'].toFixed(1)}%, p95 ${ep.values['p(95)'].toFixed(1)}%`);
  }
  lines.push('');
  const counts = [];
  for (const c of ['registered', 'admitted', 'completed', 'admitted_via{via:sse}', 'admitted_via{via:poll}', 'sse_event_count', 'sse_reconnects', 'http_reqs', 'iterations', 'dropped_iterations']) {
    const v = val(data, c, 'count');
    if (v !== undefined) counts.push(`${c} ${v}`);
  }
  lines.push(`counts: ${counts.join(', ')}`);
  const rate = val(data, 'http_reqs', 'rate');
  const regRate = val(data, 'registered', 'rate');
  lines.push(`rates: http ${rate ? rate.toFixed(1) : '-'}/s, registrations ${regRate ? regRate.toFixed(1) : '-'}/s`);
  const errs = STEPS.map((s) => [s, val(data, `step_errors{step:${s}}`, 'count') || 0]).filter((e) => e[1] > 0);
  lines.push(`errors by step: ${errs.length ? errs.map((e) => `${e[0]} ${e[1]}`).join(', ') : 'none'}`);
  const rates = [];
  const sseUsed = !!(data.setup_data && data.setup_data.useSSE);
  for (const r of ['admission_success', 'http_req_failed', 'checks'].concat(sseUsed ? ['sse_failed'] : [])) {
    const m = data.metrics[r];
    if (m && m.values) rates.push(`${r} ${(100 * m.values.rate).toFixed(2)}% (${m.values.passes}/${m.values.passes + m.values.fails})`);
  }
  lines.push(`rates: ${rates.join(', ')}`);
  const verdict = ledgerVerdict(data);
  lines.push(verdict.text);
  const failed = [];
  for (const [n, m] of Object.entries(data.metrics)) {
    for (const [cond, th] of Object.entries(m.thresholds || {})) {
      if (!th.ok) failed.push(`${n}: ${cond}`);
    }
  }
  lines.push(`thresholds: ${failed.length ? 'FAILED ' + failed.join('; ') : 'all met'}`);
  const text = lines.join('\n') + '\n';
  const out = { stdout: text };
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const json = JSON.stringify(Object.assign({ ledger: verdict, summary: lines }, data), null, 2);
  out[`${RESULTS_DIR}/${name}.json`] = json;
  out[`${RESULTS_DIR}/${name}.txt`] = text;
  out[`${RESULTS_DIR}/${name}-${stamp}.json`] = json;
  out[`${RESULTS_DIR}/${name}-${stamp}.txt`] = text;
  return out;
}
