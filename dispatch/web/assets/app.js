// gpudispatch's page: apply the updates the server sends (server-sent
// events), tick elapsed times, follow a job's logs. The page reads without it.
"use strict";
(function () {
  var conn = document.getElementById("conn");
  var skew = 0; // server clock minus this one's, in ms

  function human(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    var h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
    s = s % 60;
    if (h) return h + "h" + m + "m" + s + "s";
    if (m) return m + "m" + s + "s";
    return s + "s";
  }
  function tick() {
    var now = Date.now() + skew;
    document.querySelectorAll("[data-since]").forEach(function (el) {
      var since = +el.getAttribute("data-since");
      if (since > 0) el.textContent = human(now - since);
    });
    // The timeline's running bars grow to now, and its time axis with them.
    document.querySelectorAll(".timeline").forEach(function (tl) {
      var t0 = +tl.getAttribute("data-t0"), span = +tl.getAttribute("data-span");
      var running = tl.querySelectorAll("rect[data-start]");
      if (running.length) span = Math.max(span, (now - t0) / 1000);
      running.forEach(function (r) { r.setAttribute("width", Math.max(0, (now - +r.getAttribute("data-start")) / 1000)); });
      tl.querySelectorAll("svg").forEach(function (s) { s.setAttribute("viewBox", "0 0 " + span + " 1"); });
    });
  }
  setInterval(tick, 1000);

  // The filter of the page's URL (?state=failed&name=train_*) applies to
  // every update, as the server applied it to the first load.
  var params = new URLSearchParams(location.search);
  var fState = params.get("state") || "", fName = params.get("name") || "";
  var fRe = fName ? new RegExp("^" + fName.replace(/[.+^${}()|\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$") : null;
  function shown(li) {
    var st = li.getAttribute("data-state");
    if (fState === "unsuccessful") {
      if (st === "finished" || st === "waiting" || st === "running") return false;
    } else if (fState && fState !== st) return false;
    return !fRe || fRe.test(li.getAttribute("data-id"));
  }
  function applyFilter() {
    document.querySelectorAll("li[data-id]").forEach(function (li) { li.hidden = !shown(li); });
  }
  applyFilter();

  // A part is not replaced while someone types in it.
  var held = {};
  function replace(id, html) {
    var el = document.getElementById(id);
    if (!el) return;
    if (el.contains(document.activeElement) && document.activeElement.tagName === "INPUT") {
      held[id] = html;
      return;
    }
    el.innerHTML = html;
    applyFilter();
    tick();
  }
  document.addEventListener("focusout", function () {
    setTimeout(function () {
      Object.keys(held).forEach(function (id) { var h = held[id]; delete held[id]; replace(id, h); });
    }, 0);
  });

  var url = document.body.getAttribute("data-stream");
  if (!url || !window.EventSource) return;
  var out = document.getElementById("stdout"), err = document.getElementById("stderr");
  if (out) url += "?out=" + out.getAttribute("data-offset") + "&err=" + err.getAttribute("data-offset");
  var es = new EventSource(url);
  es.onopen = function () { conn.textContent = "live"; conn.className = "conn live"; };
  es.onerror = function () { conn.textContent = "reconnecting…"; conn.className = "conn"; };
  es.addEventListener("clock", function (e) { skew = +e.data - Date.now(); tick(); });
  ["progress", "timeline", "hosts", "queue", "finished", "job"].forEach(function (id) {
    es.addEventListener(id, function (e) { replace(id, e.data); });
  });
  function append(pre, data) {
    var t = JSON.parse(data);
    var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (t.skipped) pre.appendChild(document.createTextNode("\n… " + t.skipped + " bytes skipped (see the whole file)\n"));
    pre.appendChild(document.createTextNode(t.text));
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }
  es.addEventListener("stdout", function (e) { append(out, e.data); });
  es.addEventListener("stderr", function (e) { append(err, e.data); });
  es.addEventListener("attempt", function () { out.textContent = ""; err.textContent = ""; });
})();
