// jobguard's monitoring pages' script: live refresh, and a confirmation before a form that asks
// for one. Live refresh (the jobs page, a running workflow's page): every data-interval seconds,
// while the box is ticked and the tab is visible, the page reads itself again and swaps in its
// #live part (counts, jobs, next link; a workflow's status, DAG and cancel button). A failed read
// says so and is tried again at the next tick; nothing else on the page (the form, a half-typed
// search) is touched. A #live marked data-ended="yes" (a workflow that has ended) stops it.
// A form with data-confirm asks before it is sent; confirmed, it is sent with confirm=yes (without
// script the server answers its own confirmation page instead).
(function () {
  "use strict";
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (!question) return;
    if (!window.confirm(question)) {
      ev.preventDefault();
      return;
    }
    if (!form.querySelector("input[name=confirm]")) {
      var yes = document.createElement("input");
      yes.type = "hidden";
      yes.name = "confirm";
      yes.value = "yes";
      form.appendChild(yes);
    }
  });
  var live = document.getElementById("live");
  var box = document.getElementById("live-toggle");
  var state = document.getElementById("live-state");
  if (!live || !box || !state) return;
  var seconds = Math.max(1, parseInt(live.getAttribute("data-interval"), 10) || 5);
  var busy = false;
  var timer = 0;
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
        if (!fresh) throw new Error("nothing to show in the answer");
        document.getElementById("live").replaceWith(document.importNode(fresh, true));
        state.textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
        state.className = "muted";
        if (fresh.getAttribute("data-ended") === "yes") {
          window.clearInterval(timer);
          box.checked = false;
          box.disabled = true;
          state.textContent = "ended; refresh stopped";
        }
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
  timer = window.setInterval(tick, seconds * 1000);
})();
