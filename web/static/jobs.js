// jobguard's jobs page: live refresh. Every data-interval seconds, while the box is ticked and the
// tab is visible, the page reads itself again (same search) and swaps in its #live part (counts,
// jobs, next link). A failed read says so and is tried again at the next tick; nothing else on the
// page (the form, a half-typed search) is touched.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var box = document.getElementById("live-toggle");
  var state = document.getElementById("live-state");
  if (!live || !box || !state) return;
  var seconds = Math.max(1, parseInt(live.getAttribute("data-interval"), 10) || 5);
  var busy = false;
  function tick() {
    if (!box.checked || document.hidden || busy) return;
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) throw new Error("no jobs in the answer");
        document.getElementById("live").replaceWith(document.importNode(fresh, true));
        state.textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
        state.className = "muted";
      })
      .catch(function (e) {
        state.textContent = "refresh failed (" + e.message + "); trying again in " + seconds + " s";
        state.className = "error";
      })
      .finally(function () { busy = false; });
  }
  box.addEventListener("change", function () {
    state.textContent = box.checked ? "live" : "paused";
  });
  window.setInterval(tick, seconds * 1000);
})();
