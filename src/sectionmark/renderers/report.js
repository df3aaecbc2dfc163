// sectionmark HTML report: tabs, folding section tree, sortable and filterable tables, per-call timeline.
// Every string from the profile reaches the page as text (textContent, setAttribute), never as markup.
(function () {
  "use strict";
  var root = document.documentElement, problems = [];
  function problem(text) { problems.push(text); root.setAttribute("data-problems", problems.join("\n")); }
  window.addEventListener("error", function (event) { problem("error: " + event.message); });
  document.addEventListener("securitypolicyviolation", function (event) {
    problem("blocked: " + event.violatedDirective + " " + event.blockedURI);
  });
  var data = JSON.parse(document.getElementById("sm-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  function each(list, f) { Array.prototype.forEach.call(list, f); }
  function make(tag, attributes, parent, text) {
    var element = document.createElementNS(SVG, tag);
    for (var name in attributes) element.setAttribute(name, attributes[name]);
    if (text !== undefined) element.textContent = text;
    if (parent) parent.appendChild(element);
    return element;
  }
  function formatNs(ns) {
    var size = Math.abs(ns);
    if (size >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (size >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (size >= 1e3) return (ns / 1e3).toFixed(3) + " \u00b5s";
    return ns.toFixed(0) + " ns";
  }

  // Tabs (a recording: one per function).
  var tabs = document.querySelectorAll("section.tab"), buttons = document.querySelectorAll("nav.tabs button");
  function showTab(index) {
    each(tabs, function (tab, i) { tab.hidden = i !== index; });
    each(buttons, function (button, i) { button.classList.toggle("on", i === index); });
  }
  each(buttons, function (button, i) { button.addEventListener("click", function () { showTab(i); }); });

  // Section tree: folding a row hides every row nested under it (rows are depth first).
  function fold(row, folded) {
    var rows = row.parentNode.rows, depth = +row.dataset.depth, hiddenBelow = Infinity;
    row.classList.toggle("folded", folded);
    for (var j = row.sectionRowIndex + 1; j < rows.length && +rows[j].dataset.depth > depth; j++) {
      var d = +rows[j].dataset.depth;
      if (d <= hiddenBelow) hiddenBelow = Infinity;  // left the subtree of a folded descendant
      rows[j].hidden = folded || d > hiddenBelow;
      if (!folded && hiddenBelow === Infinity && rows[j].classList.contains("folded")) hiddenBelow = d;
    }
  }
  each(document.querySelectorAll("table.tree button.fold"), function (button) {
    var row = button.closest("tr");
    button.addEventListener("click", function () { fold(row, !row.classList.contains("folded")); });
  });

  // Sortable tables (click a header; numbers with units sort by value) and filters.
  var UNITS = { ns: 1, "\u00b5s": 1e3, ms: 1e6, s: 1e9, B: 1, kB: 1e3, MB: 1e6, GB: 1e9, "%": 1 };
  function sortKey(text) {
    var match = /^\s*(-?[0-9.]+(?:e[+-]?[0-9]+)?)\s*(\S*)\s*$/.exec(text);
    return match && (match[2] === "" || match[2] in UNITS) ? parseFloat(match[1]) * (UNITS[match[2]] || 1) : NaN;
  }
  each(document.querySelectorAll("table.sortable"), function (table) {
    var body = table.tBodies[0];
    each(table.tHead.rows[0].cells, function (header, column) {
      header.addEventListener("click", function () {
        var descending = header.dataset.order !== "descending";
        each(table.tHead.rows[0].cells, function (other) { delete other.dataset.order; });
        header.dataset.order = descending ? "descending" : "ascending";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[column].textContent, y = b.cells[column].textContent, kx = sortKey(x), ky = sortKey(y);
          var order = isNaN(kx) || isNaN(ky) ? x.localeCompare(y) : kx - ky;
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  each(document.querySelectorAll("input.filter"), function (input) {
    var table = document.getElementById(input.dataset.table);
    input.addEventListener("input", function () {
      var wanted = input.value.toLowerCase();
      each(table.tBodies[0].rows, function (row) { row.hidden = row.textContent.toLowerCase().indexOf(wanted) < 0; });
    });
  });

  // Timeline of one call: section spans above the dispatches of each queue; wheel zooms, dragging pans.
  var LEFT = 190, ROW = 18, AXIS = 24;
  each(document.querySelectorAll("div.timeline"), function (box) {
    var timeline = data.tabs[+box.dataset.tab].timeline, sections = data.tabs[+box.dataset.tab].sections;
    var chooser = box.querySelector("select"), picture = box.querySelector("svg.calls");
    var width = +picture.getAttribute("width"), plotWidth = width - LEFT, view = [0, 1], items = [], axis, plot;
    timeline.calls.forEach(function (call, i) {
      var option = document.createElement("option");
      option.value = i;
      option.dataset.call = call.call;
      option.textContent = call.label;
      chooser.appendChild(option);
    });
    function x(time) { return (time - view[0]) / (view[1] - view[0]) * plotWidth; }
    function place() {
      items.forEach(function (item) {
        var a = x(item.start), b = x(item.end);
        item.bar.setAttribute("x", a);
        item.bar.setAttribute("width", Math.max(b - a, 0.5));
        if (item.label) {
          var room = Math.floor((Math.min(b, plotWidth) - Math.max(a, 0) - 6) / 6.5);
          item.label.setAttribute("x", Math.max(a, 0) + 3);
          item.label.textContent = room >= item.name.length ? item.name : room > 2 ? item.name.slice(0, room - 1) + "\u2026" : "";
        }
      });
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      var span = view[1] - view[0], step = Math.pow(10, Math.floor(Math.log10(span / 8)));
      step *= span / step > 40 ? 5 : span / step > 16 ? 2 : 1;
      for (var tick = Math.ceil(view[0] / step) * step; tick <= view[1]; tick += step) {
        make("line", { x1: x(tick), x2: x(tick), y1: AXIS - 6, y2: AXIS, stroke: "#888" }, axis);
        var label = formatNs(tick).replace(/\.(\d*?)0+ /, ".$1 ").replace(". ", " ");  // 12.500 µs -> 12.5 µs
        make("text", { x: x(tick) + 2, y: AXIS - 8, "font-size": 10, fill: "#555" }, axis, label);
      }
    }
    function draw(index) {
      var call = timeline.calls[index];
      while (picture.firstChild) picture.removeChild(picture.firstChild);
      picture.setAttribute("data-call", call.call);
      picture.setAttribute("height", AXIS + call.rows.length * ROW + 4);
      call.rows.forEach(function (name, row) {
        make("text", { x: 4, y: AXIS + row * ROW + 13, "font-size": 11 }, picture, name);
        make("line", { x1: LEFT, x2: width, y1: AXIS + (row + 1) * ROW, y2: AXIS + (row + 1) * ROW, stroke: "#eee" }, picture);
      });
      plot = make("svg", { x: LEFT, y: 0, width: plotWidth, height: AXIS + call.rows.length * ROW }, picture);
      axis = make("g", {}, plot);
      items = [];
      call.spans.forEach(function (s) {
        var g = make("g", { "class": "span" }, plot), name = sections[s[2]][0];
        var bar = make("rect", { y: AXIS + s[3] * ROW + 2, height: ROW - 4, fill: sections[s[2]][1], "fill-opacity": 0.3,
                                 stroke: sections[s[2]][1] }, g);
        make("title", {}, bar, name + ": " + formatNs(s[0]) + " to " + formatNs(s[1]));
        items.push({ start: s[0], end: s[1], bar: bar, name: name,
                     label: make("text", { y: AXIS + s[3] * ROW + 13, "font-size": 10 }, g) });
      });
      call.bars.forEach(function (d) {
        var bar = make("rect", { "class": "dispatch", y: AXIS + d[3] * ROW + 2, height: ROW - 4, fill: sections[d[2]][1] }, plot);
        var count = d[6] > 1 ? d[6] + " dispatches merged: " : "";
        make("title", {}, bar, count + timeline.strings[d[4]] + "\n" + timeline.strings[d[5]] + "\n" +
             formatNs(d[0]) + " + " + formatNs(d[1] - d[0]));
        items.push({ start: d[0], end: d[1], bar: bar });
      });
      view = [0, Math.max(call.length, 1)];
      place();
    }
    var drag = null;
    picture.addEventListener("wheel", function (event) {
      var offset = event.clientX - picture.getBoundingClientRect().left - LEFT;
      if (offset < 0) return;
      event.preventDefault();
      var at = view[0] + offset / plotWidth * (view[1] - view[0]), factor = event.deltaY < 0 ? 0.8 : 1.25;
      if ((view[1] - view[0]) * factor < 10) return;
      view = [at - (at - view[0]) * factor, at + (view[1] - at) * factor];
      place();
    }, { passive: false });
    picture.addEventListener("mousedown", function (event) { drag = { x: event.clientX, view: view.slice() }; });
    window.addEventListener("mouseup", function () { drag = null; });
    window.addEventListener("mousemove", function (event) {
      if (!drag) return;
      var shift = (event.clientX - drag.x) / plotWidth * (drag.view[1] - drag.view[0]);
      view = [drag.view[0] - shift, drag.view[1] - shift];
      place();
    });
    box.querySelector("button.reset").addEventListener("click", function () { draw(+chooser.value); });
    chooser.addEventListener("change", function () { draw(+chooser.value); });
    chooser.value = timeline.shown;
    draw(timeline.shown);
  });

  // Addresses: #call=K shows measured call K in every timeline that has it; #fold=ID folds that tree row.
  // A part it does not understand (a bad %-escape, an id that is no tree row, an unknown key) is ignored.
  location.hash.slice(1).split("&").forEach(function (part) {
    var pair = part.split("="), value;
    try { value = decodeURIComponent(pair[1] || ""); } catch (error) { return; }
    var row = pair[0] === "fold" ? document.getElementById(value) : null;
    if (row && row.matches("table.tree tr[data-depth]")) fold(row, true);
    if (pair[0] === "call") {
      each(document.querySelectorAll("div.timeline select"), function (chooser) {
        each(chooser.options, function (option) {
          if (option.dataset.call === value) { chooser.value = option.value; chooser.dispatchEvent(new Event("change")); }
        });
      });
    }
  });
  showTab(0);
  root.setAttribute("data-resources", performance.getEntriesByType("resource").length);
  void document.body.offsetHeight;  // lay the page out before reading the clock
  root.setAttribute("data-render-ms", performance.now().toFixed(1));
})();
