/*
 * pow-worker.js: the waiting room's proof-of-work solver, run as a Web Worker
 * (waitroom.js starts it; the api serves it at /waitroom-pow.js after
 * sha256.js, fast-sha256 1.3.0 from npm, public domain, vendored unchanged).
 *
 * Message in: {challenge, difficulty}. It counts x = 0, 1, 2, ... until
 * sha256(challenge + ":" + x) has `difficulty` leading zero bits (services/api/pow's
 * rule) and posts {solution: String(x), tries}. About 2^difficulty tries:
 * 2^18 is about half a second in a current browser.
 */
"use strict";
self.onmessage = function (e) {
  var challenge = e.data.challenge, difficulty = e.data.difficulty;
  var prefix = new TextEncoder().encode(challenge + ":");
  var buf = new Uint8Array(prefix.length + 20);
  buf.set(prefix);
  var out = new Uint8Array(32);
  var h = new sha256.Hash();
  for (var n = 0; ; n++) {
    var s = String(n), len = prefix.length;
    for (var i = 0; i < s.length; i++) buf[len + i] = s.charCodeAt(i);
    h.reset();
    h.update(buf, len + s.length);
    h.finish(out);
    if (zeros(out) >= difficulty) {
      self.postMessage({ solution: s, tries: n + 1 });
      return;
    }
  }
};

function zeros(hash) {
  var n = 0;
  for (var i = 0; i < hash.length; i++) {
    if (hash[i] === 0) { n += 8; continue; }
    return n + Math.clz32(hash[i]) - 24;
  }
  return n;
}
