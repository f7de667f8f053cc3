"use strict";
// The room's page script, the same on the default page and on a seller's
// template: it draws the live slots (found by id; a template may leave any
// out) in the reader's language; waitroom.js (served by the api, documented
// there) registers or resumes, listens on Server-Sent Events and falls back
// to polling.
(function () {
  const cfg = JSON.parse(document.getElementById("cfg").textContent);
  const lang = cfg.lang || "en";
  const none = document.createElement("span"); // a slot the template left out
  const $ = (id) => document.getElementById(id) || none;
  // t is the reader's string of key, with {name} filled from vars.
  const t = (key, vars) => String(cfg.t[key] == null ? key : cfg.t[key]).replace(/\{(\w+)\}/g, (m, k) => (vars && k in vars ? vars[k] : m));
  const root = document.documentElement;
  if (!root.lang) root.lang = lang;
  const number = new Intl.NumberFormat(lang);
  const units = {};
  const unit = (n, u) => (units[u] = units[u] || new Intl.NumberFormat(lang, { style: "unit", unit: u, unitDisplay: "short" })).format(n);
  const clock = new Intl.DateTimeFormat(lang, { hour: "numeric", minute: "2-digit", second: "2-digit" });

  // The language links (default page): each keeps the page's query.
  for (const a of document.querySelectorAll("a[data-lang]")) {
    const q = new URLSearchParams(location.search);
    q.set("lang", a.dataset.lang);
    a.href = "?" + q.toString();
    if (a.dataset.lang === lang) a.setAttribute("aria-current", "true");
  }

  const status = (s) => t("status." + s);
  let first = 0;

  // announce tells screen readers, politely, what changed, in one live
  // region: a new status, or a position that moved meaningfully (below).
  let said = "";
  function announce(text) {
    if (!text || text === said) return;
    said = text;
    $("announce").textContent = text;
  }
  // A position is announced when it is the first, then at most every 20 s
  // and only when it fell by a fifth since the last announcement (in the
  // last ten: by one): never on every update.
  let announcedPos = 0, announcedAt = 0;
  function announcePosition(pos, eta) {
    const now = Date.now();
    const moved = announcedPos === 0 || (now - announcedAt >= 20000 && (pos <= 10 ? pos < announcedPos : pos <= announcedPos * 0.8));
    if (!moved) return;
    announcedPos = pos; announcedAt = now;
    announce(eta == null ? t("announce.position", { position: number.format(pos) })
      : t("announce.positionEta", { position: number.format(pos), eta: fmtEta(eta) }));
  }
  let lastStatus = "";
  function state(s) {
    root.dataset.wrState = s;
    if (s === lastStatus) return;
    lastStatus = s;
    if (s !== "WAITING" && s !== "RECONNECTING" && s !== "PENDING") announce(status(s));
  }

  // refused shows a registration the item did not take (REJECTED, with the
  // operator's message, the item's rejectMessage, when there is one; or
  // SOLD_OUT, CLOSED) as the final status it is.
  function refused(s, message) {
    $("status").textContent = status(s);
    $("status").dataset.status = s;
    heading(s);
    state(s);
    $("keep").style.display = "none";
    $("position").textContent = "–";
    $("message").textContent = message || "";
  }
  $("item").textContent = cfg.name || cfg.itemId;

  function heading(s) {
    const h = $("heading"), name = $("item");
    h.dataset.status = s;
    h.textContent = "";
    h.append(cfg.t["heading." + s] == null ? t("heading.WAITING") : t("heading." + s), name);
  }

  function fmtEta(s) {
    if (s == null) return t("etaNone");
    if (s < 60) return unit(s, "second");
    const m = Math.round(s / 60);
    return m < 60 ? unit(m, "minute") : unit(Math.floor(m / 60), "hour") + " " + unit(m % 60, "minute");
  }

  // The countdown to the draw of a PRE_QUEUE registration (drawAt: unix ms),
  // ticking locally; the draw's result comes as the next update.
  let drawAt = 0, ticker = 0;
  function countdown() {
    const left = Math.max(0, Math.ceil((drawAt - Date.now()) / 1000));
    $("countdown").dataset.remaining = left;
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = String(left % 60).padStart(2, "0");
    $("countdown").textContent = left <= 0 ? t("drawing") : h > 0 ? h + ":" + String(m).padStart(2, "0") + ":" + s : m + ":" + s;
  }
  function preQueue(st) {
    const pre = st.status === "PRE_QUEUE" || (st.status === "RECONNECTING" && drawAt > 0 && $("prequeue").classList.contains("show"));
    $("prequeue").classList.toggle("show", pre);
    // No position before the draw: only the countdown and the status.
    for (const el of [$("position"), ...document.querySelectorAll(".wr-queue-info")]) el.style.display = pre ? "none" : "";
    if (st.status === "PRE_QUEUE" && st.drawAt) {
      drawAt = st.drawAt;
      if (!ticker) ticker = setInterval(countdown, 250);
      countdown();
    } else if (!pre && ticker) { clearInterval(ticker); ticker = 0; }
  }

  // The place the site's kit registered (auto entry: #queue=<token>), taken
  // out of the address bar at once.
  const handed = new URLSearchParams(location.hash.slice(1)).get("queue") || undefined;
  if (handed) history.replaceState(null, "", location.pathname + location.search);
  const room = Waitroom.join({
    itemId: cfg.itemId,
    token: handed,
    userId: new URLSearchParams(location.search).get("userId") || undefined,
    // The site's signed word of who the user is (its link to this page).
    assertion: new URLSearchParams(location.search).get("assertion") || undefined,
    // The first position seen is where the bar starts; it is kept with the
    // registration, so a reload does not start the bar again at 0.
    onJoin(reg) { first = reg.first || 0; },
    onTransport(tr) { document.body.dataset.transport = tr; },
    onNotice(text) { $("notice").textContent = text; },
    onError(err) {
      // The item takes no new registrations: the operator's message is the answer, not an error.
      if (err.code === "REGISTRATION_REJECTED") { refused("REJECTED", err.message); return; }
      if (err.code === "SOLD_OUT" || err.code === "QUEUE_CLOSED") { refused(err.code === "SOLD_OUT" ? "SOLD_OUT" : "CLOSED"); return; }
      $("error").textContent = err.message; $("status").dataset.status = "ERROR";
    },
    onWork(w) {
      $("status").textContent = t("working");
      $("status").dataset.status = "WORKING";
      document.body.dataset.work = w.difficulty;
    },
    onUpdate(st) {
      preQueue(st);
      $("status").textContent = status(st.status);
      $("status").dataset.status = st.status;
      state(st.status);
      if (st.status === "WAITING" && st.position) {
        if (st.position > first) { first = st.position; room.remember("first", first); }
        $("position").textContent = number.format(st.position);
        $("total").textContent = st.waitingTotal ? t("ofTotal", { total: number.format(st.waitingTotal) }) : "";
        $("bar").value = first > 1 ? (first - st.position) / (first - 1) : 0;
        $("eta").textContent = fmtEta(st.etaSeconds);
        announcePosition(st.position, st.etaSeconds);
      }
      if (Waitroom.FINAL[st.status]) { heading(st.status); $("keep").style.display = "none"; }
      if (st.status === "REJECTED") refused("REJECTED", st.message);
      if (st.status === "ADMITTED") {
        $("waiting").style.display = "none";
        $("admitted").classList.add("show");
        $("admission-token").textContent = st.admissionToken || "";
        $("valid-until").textContent = st.expiresAt ? t("validUntil", { time: clock.format(new Date(st.expiresAt)) }) : "";
        $("continue").href = cfg.target.replace("{itemId}", encodeURIComponent(cfg.itemId))
          .replace("{admissionToken}", encodeURIComponent(st.admissionToken || ""));
      }
    },
  });
})();
