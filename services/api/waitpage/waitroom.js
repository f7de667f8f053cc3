/*
 * waitroom.js: the browser client of a waitroom waiting room, served by the
 * api at /waitroom.js. The api's own page (/items/{itemId}/wait) is built on
 * it; a site that draws its own page uses it the same way:
 *
 *   <script src="https://queue.example.com/waitroom.js"></script>
 *   <script>
 *     const room = Waitroom.join({
 *       itemId: "concert-2026",
 *       base: "https://queue.example.com",   // the api (or its front door); "" = this origin
 *       userId: "alice",                      // optional label: the server makes one
 *       assertion: "eyJ…",                    // optional: the site's signed word of who the user is
 *       token: "…",                           // optional: a place registered for this visitor already
 *                                             // (the kit's auto entry, #queue= on the page's URL)
 *       onJoin(reg) { ... },                  // registered, or resumed from storage
 *       onUpdate(st) { ... },                 // every status: see below
 *       onNotice(text) { ... },               // the operator's message to everyone waiting ("": cleared)
 *       onTransport(t) { ... },               // "sse" or "poll"
 *       onError(err) { ... },                 // could not register (closed, sold out…):
 *                                             // err.code, err.message (the operator's for
 *                                             // REGISTRATION_REJECTED)
 *       onWork(w) { ... },                    // solving the item's proof-of-work: {difficulty}
 *       bypass: "wrb1.…",                     // optional: an operator's bypass code
 *     });
 *     // room.leave() gives the place up; room.close() stops listening.
 *   </script>
 *
 * What it does: registers (POST /api/v1/items/{itemId}/registrations), or
 * resumes the registration it stored for that item (localStorage, key
 * "waitroom:{itemId}"), so a reload keeps the place. Given a token (a place
 * the site's kit registered), it follows that place and stores it instead. It listens on
 * Server-Sent Events (the browser reconnects by itself after a network drop,
 * with Last-Event-ID) and falls back to polling the status (with back-off up
 * to 10 s) when no stream can be opened or a reconnect is refused. A status
 * answer of 401 (the stored token is no longer valid) registers again. A
 * registration carries a random requestId, stored until its 202 arrives, and
 * is sent again (same requestId) after a network error or a 503: a retry whose
 * first answer was lost gets the same place back, never a second one.
 *
 * Identity: a userId typed into the page is only a label; the place belongs to
 * the token the registration returned, and nobody reads or leaves it with a
 * name. A site that knows its user sends an assertion (a short-lived JWT it
 * signs; the page takes it from ?assertion=): then a second device of the same
 * user resumes the user's one place. Its register answer's token reads
 * DUPLICATE at first; the status answer then carries a new "token" for the
 * user's place, which the client keeps from then on.
 *
 * onUpdate gets {status, position, waitingTotal, etaSeconds, admissionToken,
 * expiresAt}: status is PENDING, WAITING (with position, waitingTotal and,
 * unless admission is paused, etaSeconds), ADMITTED (with admissionToken and
 * expiresAt), one of the final SOLD_OUT, CLOSED, EXPIRED, LEFT, COMPLETED,
 * REJECTED (with message, the operator's word, when the item has one),
 * ABANDONED (away longer than the item's idle timeout), BLOCKED, or
 * RECONNECTING while the connection is down; PRE_QUEUE (with
 * drawAt, unix ms, and inDraw) while the registration waits for the draw of
 * a scheduled sale or a random-mode window: count down to drawAt, the next
 * update after it gives the drawn position. Positions never go
 * up: an older update arriving late is dropped. After a final status other
 * than ADMITTED the stored registration is forgotten (the next join
 * registers again); an ADMITTED one is kept, so coming back shows the
 * admission (or COMPLETED once it was used).
 *
 * Proof-of-work: when the item asks one (the register answers 403
 * POW_REQUIRED with a challenge), the client solves it in a Web Worker
 * (/waitroom-pow.js, fetched and started from a Blob so a page on another
 * origin can use it too), calls onWork first, and registers again with
 * {pow: {challenge, solution}}; a challenge refused as expired or reused is
 * replaced by a fresh one (GET .../challenge), up to three times. A bypass
 * code, when given, is sent instead and needs no proof.
 *
 * room.remember(key, value) stores a value of the page's own with the
 * registration (the page keeps where its progress bar started); onJoin gets
 * them back.
 */
(function (global) {
  "use strict";
  const FINAL = { ADMITTED: 1, SOLD_OUT: 1, CLOSED: 1, EXPIRED: 1, LEFT: 1, COMPLETED: 1, REJECTED: 1, BLOCKED: 1 };
  FINAL.ABANDONED = 1; // released idle (the item's idleTimeoutSeconds)
  FINAL.DUPLICATE = 1; // another token of the proven user holds the place, which has ended
  const EVENTS = [["pre_queue", "PRE_QUEUE"], ["position", "WAITING"], ["admitted", "ADMITTED"], ["sold_out", "SOLD_OUT"], ["closed", "CLOSED"],
    ["expired", "EXPIRED"], ["left", "LEFT"], ["completed", "COMPLETED"]];
  EVENTS.push(["abandoned", "ABANDONED"], ["duplicate", "DUPLICATE"]);
  // Every event the notifier sends: "pending" (not in the line yet) and
  // "rejected" (applied, never placed: its data may carry the operator's
  // message), or the stream would end unheard and reconnect for ever.
  EVENTS.push(["pending", "PENDING"], ["rejected", "REJECTED"]);

  function join(opts) {
    if (!opts || !opts.itemId) throw new Error("Waitroom.join: itemId is required");
    const base = (opts.base || "").replace(/\/+$/, "");
    const store = opts.storage === undefined ? global.localStorage : opts.storage;
    const key = "waitroom:" + opts.itemId;
    const call = (f, ...a) => { if (typeof f === "function") f(...a); };
    let reg = null, done = false, closed = false, source = null, last = Infinity;

    const room = {
      itemId: opts.itemId,
      transport: "",
      get registration() { return reg; },
      remember(k, v) { if (reg) { reg[k] = v; save(); } },
      close() { closed = done = true; if (source) source.close(); },
      async leave() {
        room.close();
        if (!reg) return;
        const r = await fetch(base + reg.statusUrl, { method: "DELETE" });
        forget();
        if (!r.ok && r.status !== 401) throw new Error("leave failed: status " + r.status);
      },
    };
    const save = () => { if (store && reg) store.setItem(key, JSON.stringify(reg)); };
    const forget = () => { if (store) store.removeItem(key); };
    const transport = (t) => { room.transport = t; call(opts.onTransport, t); };

    // notice tells the page the operator's message when it changed.
    let told = "";
    function notice(text) {
      if (text === told) return;
      told = text;
      call(opts.onNotice, text);
    }

    function update(st) {
      if (closed) return;
      if (st.status === "DUPLICATE" && source) {
        // A stream says DUPLICATE; the status answer resumes the proven
        // user's place with a new token, or says DUPLICATE again (final).
        source.close(); source = null; poll(); return;
      }
      if (st.status === "WAITING" && st.position) {
        if (st.position > last) return; // a late, older update
        last = st.position;
      }
      if (FINAL[st.status]) {
        done = true;
        if (st.status !== "ADMITTED") forget();
        if (source) source.close();
      }
      call(opts.onUpdate, st);
    }

    // requestId names this attempt to join across its retries: kept (with
    // the registration's storage) until a 202 arrives, so a retry after a
    // lost answer, or a reload while the POST was in flight, gets the same
    // place back instead of a second one nobody holds (docs/api.md).
    function requestId() {
      const k = key + ":requestId";
      let id = store && store.getItem(k);
      if (!id) {
        const b = new Uint8Array(16);
        global.crypto.getRandomValues(b);
        id = "r-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
        if (store) store.setItem(k, id);
      }
      return id;
    }

    // post sends the registration, again with the same body after a network
    // error or a 503 (up to 4 tries, 0.5 s doubling): the answer may have
    // been lost after the broker took the record.
    async function post(url, body) {
      for (let tries = 0; ; tries++) {
        try {
          const r = await fetch(url, {
            method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
          });
          if (r.status !== 503 || tries >= 3) return { r, j: await r.json() };
        } catch (e) {
          if (tries >= 3) throw e;
        }
        await new Promise((ok) => setTimeout(ok, 500 * 2 ** tries));
      }
    }

    async function register() {
      const item = base + "/api/v1/items/" + encodeURIComponent(opts.itemId);
      const body = opts.userId ? { userId: opts.userId } : {};
      if (opts.bypass) body.bypass = opts.bypass;
      if (opts.assertion) body.assertion = opts.assertion;
      body.requestId = requestId();
      let r, j;
      for (let tries = 0; ; tries++) {
        ({ r, j } = await post(item + "/registrations", body));
        const code = j.error ? j.error.code : "";
        if (r.ok || tries >= 3 || !(code === "POW_REQUIRED" || code === "POW_REUSED" || code === "POW_INVALID")) break;
        const ch = j.pow || await (await fetch(item + "/challenge", { cache: "no-store" })).json();
        call(opts.onWork, { difficulty: ch.difficulty });
        body.pow = { challenge: ch.challenge, solution: await solve(ch) };
      }
      if (store && r.status < 500) store.removeItem(key + ":requestId"); // kept for a retry after a 5xx
      if (!r.ok) {
        const err = new Error(j.error ? j.error.message : "registration failed: status " + r.status);
        err.code = j.error ? j.error.code : "";
        err.status = r.status;
        throw err;
      }
      reg = { token: j.token, statusUrl: j.statusUrl, eventsUrl: j.eventsUrl };
      last = Infinity;
      save();
    }

    // adopt keeps a new queue token for the place (a resumed one): later
    // reads and streams use it.
    function adopt(tok) {
      const at = "/api/v1/items/" + encodeURIComponent(opts.itemId) + "/registrations/" + tok;
      reg = Object.assign({}, reg, { token: tok, statusUrl: at, eventsUrl: at + "/events" });
      save();
    }

    // solve runs the proof-of-work solver in a Web Worker.
    async function solve(ch) {
      const src = await (await fetch(base + "/waitroom-pow.js")).text();
      const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
      const w = new global.Worker(url);
      try {
        return await new Promise((res, rej) => {
          w.onmessage = (e) => res(e.data.solution);
          w.onerror = (e) => rej(new Error("proof-of-work: " + (e.message || "the solver failed")));
          w.postMessage({ challenge: ch.challenge, difficulty: ch.difficulty });
        });
      } finally {
        w.terminate();
        URL.revokeObjectURL(url);
      }
    }

    // Server-Sent Events first; polling when no stream works.
    function listen() {
      if (closed) return;
      if (typeof global.EventSource !== "function") { poll(); return; }
      let opened = false;
      source = new global.EventSource(base + reg.eventsUrl);
      source.onopen = () => { opened = true; transport("sse"); };
      for (const [name, status] of EVENTS) {
        source.addEventListener(name, (e) => update(Object.assign({ status }, JSON.parse(e.data || "{}"))));
      }
      source.addEventListener("notice", (e) => notice(JSON.parse(e.data || "{}").notice || ""));
      source.onerror = () => {
        if (done) return;
        // Never opened, or refused on a reconnect (the browser gives up on a
        // 4xx or 5xx answer): poll instead. Otherwise it reconnects itself.
        if (!opened || source.readyState === global.EventSource.CLOSED) { source.close(); source = null; poll(); return; }
        update({ status: "RECONNECTING" });
      };
    }

    // poll reads the status, sending back the last WAITING answer's cursor:
    // no api replica then tells a larger position than that answer did.
    async function poll() {
      transport("poll");
      let wait = 1000, cursor = "";
      while (!done) {
        try {
          const r = await fetch(base + reg.statusUrl + (cursor ? "?cursor=" + encodeURIComponent(cursor) : ""));
          if (r.status === 401) { forget(); await register(); call(opts.onJoin, reg); cursor = ""; continue; }
          const st = await r.json();
          if (!r.ok) throw new Error(st.error ? st.error.message : "status " + r.status);
          if (st.cursor) cursor = st.cursor;
          notice(st.notice || "");
          if (st.token) { adopt(st.token); update(st); if (!done) listen(); return; }
          update(st);
          // The server says when to read again: rarely far back in the line.
          wait = st.pollAfterMs > 0 ? st.pollAfterMs : 1000;
        } catch (err) {
          update({ status: "RECONNECTING" });
          wait = Math.min(wait * 2, 10000);
        }
        await new Promise((res) => setTimeout(res, wait));
      }
    }

    (async () => {
      try {
        reg = store ? JSON.parse(store.getItem(key) || "null") : null;
        if (opts.token && !(reg && reg.token === opts.token)) { reg = null; adopt(opts.token); }
        if (!reg) await register();
        call(opts.onJoin, reg);
        listen();
      } catch (err) {
        call(opts.onError, err);
      }
    })();
    return room;
  }

  global.Waitroom = { join, FINAL };
})(typeof window !== "undefined" ? window : globalThis);
