// mcpmon status page: filter as you type, and refresh the data in place.
// The page works without this file; it only saves a reload.
"use strict";
(function () {
  const form = document.getElementById("filter");
  const REFRESH_MS = 5000;

  function applyFilter() {
    if (!form) return;
    const state = form.elements.state.value;
    const q = form.elements.q.value.trim().toLowerCase();
    const rows = document.querySelectorAll("#status tbody tr[data-state]");
    let shown = 0;
    rows.forEach(function (row) {
      const ok = (!state || row.dataset.state === state) &&
        (!q || row.dataset.text.indexOf(q) !== -1);
      row.hidden = !ok;
      if (ok) shown += 1;
    });
    const counter = document.getElementById("shown");
    if (counter) counter.textContent = String(shown);
  }

  async function refresh() {
    try {
      // The unfiltered page: filtering happens here, as the user types.
      const url = new URL(window.location.href);
      url.search = "";
      const response = await fetch(url, { headers: { Accept: "text/html" } });
      if (response.ok) {
        const doc = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = doc.getElementById("status");
        const current = document.getElementById("status");
        if (fresh && current) {
          current.replaceWith(document.importNode(fresh, true));
          applyFilter();
        }
      }
    } catch (e) {
      // mcpmon restarting or unreachable: keep what is shown, try again.
    }
    window.setTimeout(refresh, REFRESH_MS);
  }

  if (form) {
    form.addEventListener("input", applyFilter);
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      applyFilter();
    });
    applyFilter();
  }
  window.setTimeout(refresh, REFRESH_MS);
})();
