/* Headroom: render plotly figures from their JSON <script>, make tables sortable, filter
   checkbox lists and focus the error summary.
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

  /* Searchable checkbox lists (models, GPUs): a filter box above the checkboxes. Without
     JavaScript the plain checkboxes work the same. Checked boxes stay visible. */
  function initChecklists(root) {
    root.querySelectorAll("[data-checklist]").forEach(function (list) {
      if (list.dataset.ready) return;
      list.dataset.ready = "1";
      var tools = document.createElement("div");
      tools.className = "checklist-tools";
      var label = document.createElement("label");
      var input = document.createElement("input");
      var status = document.createElement("span");
      input.type = "search";
      input.id = list.id + "_filter";
      input.autocomplete = "off";
      input.setAttribute("aria-controls", list.id);
      label.htmlFor = input.id;
      label.textContent = "Filter " + list.dataset.checklist;
      status.className = "checklist-status";
      status.id = list.id + "_status";
      status.setAttribute("aria-live", "polite");
      input.setAttribute("aria-describedby", status.id);
      function update() {
        var terms = input.value.toLowerCase().split(/\s+/).filter(Boolean);
        var shown = 0, checked = 0;
        list.querySelectorAll("label").forEach(function (item) {
          var box = item.querySelector("input");
          var text = item.textContent.toLowerCase();
          var match = box.checked || terms.every(function (t) { return text.indexOf(t) !== -1; });
          item.hidden = !match;
          if (match) shown += 1;
          if (box.checked) checked += 1;
        });
        status.textContent = checked + " selected, " + shown + " shown";
      }
      input.addEventListener("input", update);
      input.addEventListener("keydown", function (e) { if (e.key === "Enter") e.preventDefault(); });
      list.addEventListener("change", update);
      tools.appendChild(label);
      tools.appendChild(input);
      tools.appendChild(status);
      list.parentNode.insertBefore(tools, list);
      update();
    });
  }

  /* After a failed submit the error summary takes the focus; its links focus the field. */
  function initErrorSummary() {
    var summary = document.getElementById("error-summary");
    if (!summary) return;
    summary.focus();
    summary.querySelectorAll("a[data-focus]").forEach(function (link) {
      link.addEventListener("click", function (event) {
        var target = document.getElementById(link.dataset.focus);
        if (!target) return;
        var input = target.matches("input, select, textarea") ? target
          : target.querySelector("input, select, textarea");
        if (!input) return;
        event.preventDefault();
        input.focus();
        input.scrollIntoView({ block: "center" });
      });
    });
  }

  function init(root) { renderCharts(root); initSort(root); initChecklists(root); }

  document.addEventListener("DOMContentLoaded", function () {
    init(document);
    initErrorSummary();
    document.body.addEventListener("htmx:afterSettle", function (event) { init(event.target); });
    var share = document.getElementById("share-url");
    if (share) { share.focus(); share.select(); }
  });
})();
