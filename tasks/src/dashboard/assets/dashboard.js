// The tasks dashboard's live refresh: re-fetches the page and swaps the #live element.
// Served from the binary; the pages allow no inline script.
"use strict";
(function () {
  function start() {
    var live = document.getElementById("live");
    if (!live) return;
    var every = parseInt(live.getAttribute("data-refresh-ms") || "0", 10);
    if (!every) return;
    var toggle = document.getElementById("live-toggle");
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden || (toggle && !toggle.checked)) return;
      busy = true;
      fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (text) {
          if (text === null) return;
          var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
          var current = document.getElementById("live");
          if (fresh && current) {
            current.replaceWith(fresh);
            // A run that finished stops refreshing its page.
            if (fresh.getAttribute("data-refresh-ms") === "0") every = 0;
          }
        })
        .catch(function () {})
        .then(function () { busy = false; });
    }, every);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
// A form with data-confirm (deleting a schedule) asks first.
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) event.preventDefault();
});
