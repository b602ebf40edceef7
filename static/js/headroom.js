/* Headroom: render plotly figures from their JSON <script> and make tables sortable.
   Runs on page load and after every htmx swap (the run page swaps progress -> results). */
(function () {
  "use strict";

  function renderCharts(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      if (el.dataset.rendered) return;
      var source = document.getElementById(el.dataset.figure);
      if (!source) return;
      var figure = JSON.parse(source.textContent);
      window.Plotly.newPlot(el, figure.data, figure.layout, {
        responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]
      });
      el.dataset.rendered = "1";
    });
  }

  function cellValue(row, col) {
    var cell = row.cells[col];
    var raw = cell ? (cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent) : "";
    var number = parseFloat(raw);
    return { empty: raw === "", number: isNaN(number) ? null : number, text: raw.toLowerCase() };
  }

  function sortTable(table, col, button) {
    var th = button.closest("th");
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, col), y = cellValue(b, col);
      if (x.empty !== y.empty) return x.empty ? 1 : -1;  // blanks last either way
      var order = (x.number !== null && y.number !== null) ? x.number - y.number
        : x.text.localeCompare(y.text);
      return ascending ? order : -order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  function initSort(root) {
    root.querySelectorAll("table[data-sortable]").forEach(function (table) {
      if (table.dataset.sortReady) return;
      table.dataset.sortReady = "1";
      table.querySelectorAll("thead button[data-col]").forEach(function (button) {
        button.addEventListener("click", function () {
          sortTable(table, parseInt(button.dataset.col, 10), button);
        });
      });
    });
  }

  function init(root) { renderCharts(root); initSort(root); }

  document.addEventListener("DOMContentLoaded", function () {
    init(document);
    document.body.addEventListener("htmx:afterSettle", function (event) { init(event.target); });
    var share = document.getElementById("share-url");
    if (share) { share.focus(); share.select(); }
  });
})();
