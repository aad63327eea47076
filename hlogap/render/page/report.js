"use strict";
const R = JSON.parse(document.getElementById("report").textContent);
const fmtUs = (us) => us == null ? "-" : us >= 1e6 ? (us / 1e6).toFixed(2) + " s"
  : us >= 1e3 ? (us / 1e3).toFixed(2) + " ms" : us.toFixed(1) + " us";
const si = (v, unit) => {
  if (v == null) return "-";
  const p = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]].find(([s]) => Math.abs(v) >= s);
  return p ? (v / p[0]).toPrecision(3) + " " + p[1] + unit : v.toPrecision(3) + " " + unit;
};
const count = (n, word) => n.toLocaleString("en-US") + " " + word + (n === 1 ? "" : "s");
const pct = (f) => f == null ? "-" : Math.round(f * 100) + "%";
const el = (tag, attrs = {}, text) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
};
// An SVG element with its attributes and text, added to `svg` (the charts draw with it).
const svgChild = (svg, tag, attrs, text) => {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  svg.appendChild(e);
  return e;
};

// --- op table: sort, filter, details -------------------------------------------------
// Each op's cells are the section's (o.cells: hlogap words them, as the table does: "-" for
// the bound, gap and efficiency of an unmodeled op, `label` telling apart ops of one name in
// several modules); each column sorts by the op's figure, where the text's --sort puts it (an
// unmodeled op's gap is its whole time). The default order is the report's own (rank).
const bounded = (o, v) => o.bound_by === "unmodeled" ? null : v;
const SORT_KEYS = [
  ["rank", (o) => o.rank], ["name", (o) => o.label], ["category", (o) => o.category],
  ["occurrences", (o) => o.occurrences * o.runs_per_occurrence], ["measured_us", (o) => o.measured_us],
  ["share", (o) => o.share], ["bound_us", (o) => o.bound_us], ["gap_us", (o) => o.gap_us],
  ["efficiency", (o) => o.efficiency], ["bound_by", (o) => o.bound_by], ["hints", (o) => (o.hints[0] || "")],
];
// [key, heading, sort value, cell, a figure (right-aligned)] of each column.
const COLUMNS = SORT_KEYS.map(([key, get], k) =>
  [key, R.sections.ops.columns[k], get, (o) => o.cells[k], R.sections.ops.figures[k]]);
let sortKey = "rank", sortDir = 1, filterText = "";
const maxGap = Math.max(1e-9, ...R.ops.map((o) => bounded(o, o.gap_us) || 0));

function renderOps() {
  const table = document.getElementById("ops");
  table.textContent = "";
  const head = el("tr");
  for (const [key, label, , , num] of COLUMNS) {
    const th = el("th", {"data-key": key}, label);
    if (key === sortKey) { th.className = "sorted"; th.setAttribute("data-dir", sortDir < 0 ? " \u25bc" : " \u25b2"); }
    th.addEventListener("click", () => {
      sortDir = key === sortKey ? -sortDir : (num ? -1 : 1);
      sortKey = key;
      renderOps();
    });
    head.appendChild(th);
  }
  const thead = el("thead");
  thead.appendChild(head);
  table.appendChild(thead);
  const get = COLUMNS.find((c) => c[0] === sortKey)[2];
  const needle = filterText.toLowerCase();
  const matches = (o) => !needle || [o.label || o.name, o.category, o.bound_by, o.module,
    o.op_name, o.hints.join(" ")].join(" ").toLowerCase().includes(needle);
  const showSubs = document.getElementById("subrows").checked;
  const rows = R.ops.filter((o) => matches(o) || (showSubs && o.command_buffer_ops.some(matches)));
  rows.sort((a, b) => {
    const x = get(a), y = get(b);
    if (x == null) return 1;
    if (y == null) return -1;
    return (x < y ? -1 : x > y ? 1 : 0) * sortDir;
  });
  for (const o of rows) {
    const tr = el("tr", {class: "op", id: "op-" + o.rank});
    for (const [key, , , show, num] of COLUMNS) {
      const td = el("td", num ? {class: "num"} : {});
      if (key === "gap_us") {
        const bar = el("span", {class: "bar", style: "width:" + (40 * Math.max(0, bounded(o, o.gap_us) || 0) / maxGap).toFixed(1) + "px"});
        td.appendChild(bar);
        td.appendChild(document.createTextNode(" " + show(o)));
      } else {
        td.textContent = show(o);
      }
      tr.appendChild(td);
    }
    tr.addEventListener("click", () => toggleDetail(tr, o));
    table.appendChild(tr);
    const longest = [...o.command_buffer_ops].sort((a, b) => b.measured_us - a.measured_us);
    if (showSubs) for (const sub of longest) table.appendChild(subRow(sub));
  }
  document.getElementById("shown").textContent = rows.length + " of " + count(R.ops.length, "op");
}

// A command buffer's op under its call (estimated: its share of the call's time by its
// bound), kept under the call whatever the sort; its cells (estimated figures marked "~")
// are the section's.
function subRow(o) {
  const tr = el("tr", {class: "op sub", title: o.hints[0] || ""});
  for (const [, , , show, num] of COLUMNS) tr.appendChild(el("td", num ? {class: "num"} : {}, show(o)));
  tr.addEventListener("click", () => toggleDetail(tr, o));
  return tr;
}

function toggleDetail(tr, o) {
  const next = tr.nextElementSibling;
  if (next && next.classList.contains("detail")) { next.remove(); return; }
  const row = el("tr", {class: "detail"});
  const td = el("td", {colspan: String(COLUMNS.length)});
  const facts = [
    "module " + o.module, "FLOPs " + si(o.flops, "FLOP"), "HBM " + si(o.bytes, "B"),
    "interconnect " + si(o.comm_bytes, "B"), "T_compute " + fmtUs(o.t_compute_us),
    "T_memory " + fmtUs(o.t_memory_us), "T_comm " + fmtUs(o.t_comm_us),
  ];
  td.appendChild(el("div", {class: "muted"}, facts.join(" \u00b7 ")));
  if (o.op_name) td.appendChild(el("div", {}, "op_name: " + o.op_name + (o.source ? "  (" + o.source + ")" : "")));
  const ul = el("ul");
  for (const h of o.hints) ul.appendChild(el("li", {}, h));
  td.appendChild(ul);
  if (o.hlo) td.appendChild(el("pre", {}, o.hlo));
  row.appendChild(td);
  tr.after(row);
}

// --- roofline chart --------------------------------------------------------------------
function renderChart() {
  const box = document.getElementById("chart");
  const chip = R.chip;
  const pts = R.ops.filter((o) => o.bound_by !== "unmodeled" && o.flops > 0 && o.bytes > 0 && o.measured_us > 0)
    .map((o) => ({o, x: o.flops / o.bytes, y: o.flops * o.occurrences / (o.measured_us * 1e-6)}));
  if (!chip || !chip.peak_flops || !chip.hbm_bw) { box.appendChild(el("p", {class: "muted"}, "No chip peaks in this report: no chart.")); return; }
  if (!pts.length) {
    box.appendChild(el("p", {class: "muted"}, "No op has both FLOPs and HBM bytes that hlogap counts (unmodeled ops have none): no roofline chart to draw."));
    return;
  }
  // One roof per distinct peak: dtypes that share a peak share a line and its label.
  const byPeak = new Map();
  for (const [dtype, peak] of Object.entries(chip.peak_flops)) byPeak.set(peak, [...(byPeak.get(peak) || []), dtype]);
  const roofs = [...byPeak.entries()].sort((a, b) => b[0] - a[0]);
  const ridges = roofs.map(([peak]) => peak / chip.hbm_bw);
  const xs = [...pts.map((p) => p.x), ...ridges], ys = [...pts.map((p) => p.y), ...roofs.map(([p]) => p)];
  const x0 = Math.min(...xs) / 4, x1 = Math.max(...xs) * 4;
  const y0 = Math.min(...ys, x0 * chip.hbm_bw) / 4, y1 = Math.max(...ys) * 2;
  const W = 1000, H = 470, L = 110, B = 40, T = 14, Rm = 250;
  const sx = (x) => L + (W - L - Rm) * Math.log(x / x0) / Math.log(x1 / x0);
  const sy = (y) => H - B - (H - B - T) * Math.log(y / y0) / Math.log(y1 / y0);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  // Scales with the page (viewBox): the roofs' labels stay inside at any width.
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("class", "chart");
  const add = (tag, attrs, text) => svgChild(svg, tag, attrs, text);
  for (let d = Math.ceil(Math.log10(x0)); d <= Math.floor(Math.log10(x1)); d++) {
    add("line", {class: "grid", x1: sx(10 ** d), x2: sx(10 ** d), y1: T, y2: H - B});
    add("text", {x: sx(10 ** d), y: H - B + 14, "text-anchor": "middle"}, "1e" + d);
  }
  for (let d = Math.ceil(Math.log10(y0)); d <= Math.floor(Math.log10(y1)); d++) {
    add("line", {class: "grid", x1: L, x2: W - Rm, y1: sy(10 ** d), y2: sy(10 ** d)});
    add("text", {x: L - 6, y: sy(10 ** d) + 4, "text-anchor": "end"}, si(10 ** d, "FLOP/s"));
  }
  add("text", {x: (L + W - Rm) / 2, y: H - 6, "text-anchor": "middle"}, "arithmetic intensity (FLOP per HBM byte)");
  add("rect", {x: L, y: T, width: W - Rm - L, height: H - B - T, fill: "none", stroke: "#bbb"});
  add("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", transform: `rotate(-90 14 ${(T + H - B) / 2})`},
    "achieved FLOP/s per device (the op's FLOPs over its time, all occurrences)");
  const colors = ["#1f6feb", "#2da44e", "#8250df", "#bf8700", "#cf222e", "#0a7ea4"];
  roofs.forEach(([peak, dtypes], i) => {
    const ridge = peak / chip.hbm_bw, c = colors[i % colors.length];
    add("polyline", {class: "roof", stroke: c, points: `${sx(x0)},${sy(x0 * chip.hbm_bw)} ${sx(ridge)},${sy(peak)} ${sx(x1)},${sy(peak)}`});
    add("line", {class: "ridge", x1: sx(ridge), x2: sx(ridge), y1: sy(peak), y2: H - B});
    // Labels on the right margin, stacked so that they never overlap.
    add("text", {x: W - Rm + 6, y: Math.max(T + 10 + 14 * i, sy(peak) + 4), fill: c},
      dtypes.join("/") + " " + si(peak, "FLOP/s") + ", ridge " + ridge.toFixed(0));
  });
  for (const p of pts) {
    const r = 3 + 14 * Math.sqrt(Math.max(0, p.o.gap_us) / maxGap);
    const dot = add("circle", {cx: sx(p.x), cy: sy(p.y), r: r.toFixed(1)});
    const t = document.createElementNS(NS, "title");
    t.textContent = `${p.o.label}: ${si(p.y, "FLOP/s")} at ${p.x.toPrecision(3)} FLOP/B, lost ${fmtUs(p.o.gap_us)} (efficiency ${pct(p.o.efficiency)}: its bound over its time)`;
    dot.appendChild(t);
    dot.addEventListener("click", () => {
      filterText = ""; document.getElementById("filter").value = ""; renderOps();
      const row = document.getElementById("op-" + p.o.rank);
      document.querySelectorAll("tr.found").forEach((e) => e.classList.remove("found"));
      row.classList.add("found");
      row.scrollIntoView({block: "center"});
    });
  }
  box.appendChild(svg);
  box.appendChild(el("p", {class: "muted"}, count(pts.length, "op") + " with FLOPs and bytes; area = time lost against the bound; hover for numbers, click to find the op."));
}

// --- scopes and steps ------------------------------------------------------------------
function renderScopes() {
  // The section's groups (hlogap's rules): bound, gap and efficiency over the modeled ops,
  // the unmodeled ops' time (no bound) beside them, "-" where all are.
  const S = R.sections.scopes;
  const table = sectionTable(S.columns, S.figures, S.rows);
  table.id = "scopes";
  document.getElementById("scopes").replaceWith(table);
}

function renderSteps() {
  // The steps section's cells as hlogap words them (times wall time, shares of the devices'
  // own step time); a click shows the step's devices.
  const table = document.getElementById("steps");
  const S = R.sections.steps;
  if (!S.rows.length) { table.remove(); return; }
  const dcols = [["device", (d) => String(d.device)], ["start", (d) => fmtUs(d.start_us)], ["wall", (d) => fmtUs(d.wall_us)],
    ["at bound", (d) => fmtUs(d.bound_wall_us)], ["busy", (d) => fmtUs(d.busy_us)], ["idle", (d) => fmtUs(d.idle_us)],
    ["exposed coll", (d) => fmtUs(d.exposed_comm_us)], ["exposed host", (d) => fmtUs(d.exposed_host_us)],
    ["measured", (d) => fmtUs(d.measured_us)], ["bound", (d) => fmtUs(d.bound_us)]];
  const head = el("tr");
  for (const h of S.columns) head.appendChild(el("th", {class: "num"}, h));
  table.appendChild(head);
  S.rows.forEach((cells, k) => {
    const s = R.steps[k];
    const tr = el("tr", {class: "step"});
    for (const v of cells) tr.appendChild(el("td", {class: "num"}, v));
    tr.addEventListener("click", () => {
      const next = tr.nextElementSibling;
      if (next && next.classList.contains("detail")) { next.remove(); return; }
      const row = el("tr", {class: "detail"});
      const td = el("td", {colspan: String(S.columns.length)});
      const inner = el("table");
      const ihead = el("tr");
      for (const [h] of dcols) ihead.appendChild(el("th", {class: "num"}, h));
      inner.appendChild(ihead);
      for (const d of s.per_device || []) {
        const dr = el("tr");
        for (const [, f] of dcols) dr.appendChild(el("td", {class: "num"}, f(d)));
        inner.appendChild(dr);
      }
      td.appendChild(inner);
      row.appendChild(td);
      tr.after(row);
    });
    table.appendChild(tr);
  });
}

// --- memory: the section as hlogap words it; each module's live temporaries over program order --
function renderMemory() {
  const box = document.getElementById("memory");
  const M = R.memory, S = R.sections.memory;
  if (!M) { box.appendChild(el("p", {class: "muted"}, S.none)); return; }
  if (!S.modules.length) box.appendChild(el("p", {class: "muted"}, S.no_modules));
  const NS = "http://www.w3.org/2000/svg";
  // The report's modules in the section's order: largest static peak first.
  const modules = [...M.modules].sort((a, b) => b.peak_bytes - a.peak_bytes);
  S.modules.forEach((section, k) => {
    const m = modules[k];
    const [first, ...rest] = section.lines;
    box.appendChild(el("h3", {}, first));
    for (const line of rest) box.appendChild(el("p", {class: "muted"}, line));
    const curve = m.live_curve || [];
    if (curve.length > 1) {
      const W = 700, H = 140, L = 70, B = 20, top = Math.max(...curve) || 1;
      const svg = document.createElementNS(NS, "svg");
      svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("class", "memory-curve");
      const line = document.createElementNS(NS, "polyline");
      line.setAttribute("points", curve.map((v, i) => `${(L + (W - L - 10) * i / (curve.length - 1)).toFixed(1)},${(H - B - (H - B - 10) * v / top).toFixed(1)}`).join(" "));
      line.setAttribute("fill", "none"); line.setAttribute("stroke", "#d8572a"); line.setAttribute("stroke-width", "1.5");
      svg.appendChild(line);
      for (const [y, text] of [[10, si(top, "B")], [H - B, "0 B"]]) {
        const t = document.createElementNS(NS, "text");
        t.setAttribute("x", 4); t.setAttribute("y", y + 4); t.setAttribute("font-size", "11"); t.textContent = text;
        svg.appendChild(t);
      }
      const t = document.createElementNS(NS, "text");
      t.setAttribute("x", L); t.setAttribute("y", H - 4); t.setAttribute("font-size", "11");
      t.textContent = "live temporaries over the program (heap simulator events, in order)";
      svg.appendChild(t);
      box.appendChild(svg);
    }
    box.appendChild(sectionTable(S.buffer_columns, S.buffer_figures, section.buffers));
    for (const line of section.more) box.appendChild(el("p", {class: "muted"}, line));
  });
  const A = M.allocators || [];
  if (S.allocators.length) {
    box.appendChild(el("h3", {}, S.allocators_title));
    box.appendChild(sectionTable(S.allocator_columns, S.allocator_figures, S.allocators));
    for (const line of S.allocator_notes) box.appendChild(el("p", {class: "muted"}, line));
    const T = A.filter((a) => a.timeline);
    if (T.length) {
      box.appendChild(el("h3", {}, "In use over time (heap + stack, filled; the heap alone, line): the most in each of an allocator's buckets, the steps' starts dashed"));
      box.appendChild(el("p", {class: "muted"}, "Time runs from the profile's first op (0), as the steps' start: allocator events before it are negative."));
      const steps = (R.steps || []).map((s) => [s.step, s.start_us, s.start_us + s.wall_us]);
      const x0 = Math.min(...T.map((a) => a.timeline.start_us), ...steps.map((s) => s[1]));
      const x1 = Math.max(...T.map((a) => a.timeline.end_us), ...steps.map((s) => s[2]));
      for (const a of T) box.appendChild(allocatorChart(a, x0, x1, steps));
    }
  }
}

// A table of a section's cells: its column names, which are figures (right-aligned), its rows.
function sectionTable(columns, figures, rows) {
  const table = el("table");
  const head = el("tr");
  columns.forEach((h, k) => head.appendChild(el("th", figures[k] ? {class: "num"} : {}, h)));
  table.appendChild(head);
  for (const cells of rows) {
    const tr = el("tr");
    cells.forEach((v, k) => tr.appendChild(el("td", figures[k] ? {class: "num"} : {}, v)));
    table.appendChild(tr);
  }
  return table;
}

// One allocator's bytes in use over the profile: its buckets as steps, on an axis shared by all.
function allocatorChart(a, x0, x1, steps) {
  const NS = "http://www.w3.org/2000/svg", W = 900, H = 120, L = 70, B = 18, TOP = 16;
  const t = a.timeline, n = t.in_use_bytes.length, most = Math.max(...t.in_use_bytes) || 1;
  const when = (us) => us < 0 ? "-" + fmtUs(-us) : fmtUs(us);  // events may come before the first op
  const x = (us) => (L + (W - L - 10) * (x1 > x0 ? (us - x0) / (x1 - x0) : 0)).toFixed(1);
  const y = (v) => (H - B - (H - B - TOP) * v / most).toFixed(1);
  const at = (k) => x(t.start_us + (t.end_us - t.start_us) * k / n);
  const path = (values) => `M${at(0)},${y(values[0])}` + values.map((v, k) => ` V${y(v)} H${at(k + 1)}`).join("");
  const svg = document.createElementNS(NS, "svg");
  const add = (tag, attrs, text) => svgChild(svg, tag, attrs, text);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("class", "allocator-curve");
  // Many steps: a tick each under the axis, their numbers left out (lines would hide the curve).
  const few = steps.length <= 40;
  for (const [number, start] of steps) {
    add("line", {x1: x(start), x2: x(start), y1: few ? TOP : H - B, y2: H - B + 5, class: "step-start", stroke: "#888", "stroke-dasharray": few ? "3 3" : ""});
    if (steps.length <= 20) add("text", {x: +x(start) + 2, y: TOP + 9}, String(number));
  }
  add("path", {d: path(t.in_use_bytes) + ` V${y(0)} H${at(0)} Z`, fill: "rgba(216, 87, 42, 0.3)", stroke: "#d8572a", "stroke-width": "1.2"});
  if (t.heap_bytes.some((v, k) => v !== t.in_use_bytes[k])) add("path", {d: path(t.heap_bytes), fill: "none", stroke: "#2a6fd8", "stroke-width": "1.2"});
  const device = a.device === null ? "" : `, device ${a.device}`;
  add("text", {x: L, y: 11}, `${a.name}${a.host ? " on " + a.host : ""}${device}: at most ${si(most, "B")}` +
    (a.in_use_peak_us == null ? "" : ` at ${when(a.in_use_peak_us)}`) + ` (events from ${when(t.start_us)} to ${when(t.end_us)})`);
  add("text", {x: 4, y: TOP + 4}, si(most, "B"));
  add("text", {x: 4, y: H - B + 4}, "0 B");
  add("text", {x: L, y: H - 2}, when(x0) + " (from the profile's first op)");
  add("text", {x: W - 10, y: H - 2, "text-anchor": "end"}, when(x1));
  return svg;
}

// --- hosts (two or more): the section's tables (the header has the hosts' lines) -------------
function renderHosts() {
  const S = R.sections.hosts;
  if (!S) { document.getElementById("hosts-section").remove(); return; }
  const box = document.getElementById("hosts");
  box.appendChild(el("p", {class: "muted"}, S.note));
  for (const t of S.tables) {
    box.appendChild(el("h3", {}, t.title));
    const wrap = el("div", {class: "scroll"});
    wrap.appendChild(sectionTable(t.columns, t.figures, t.rows));
    box.appendChild(wrap);
  }
}

// --- actions: the section as hlogap words it, ranked by the step time each saves ----------
function renderActions() {
  const box = document.getElementById("actions");
  const S = R.sections.actions;
  if (!S.rows.length) { box.appendChild(el("p", {class: "muted"}, S.none)); return; }
  box.appendChild(el("p", {class: "muted"}, S.lead));
  const table = el("table");
  const head = el("tr");
  for (const h of S.columns) head.appendChild(el("th", {}, h));
  table.appendChild(head);
  for (const cells of S.rows) {
    const tr = el("tr");
    cells.forEach((v, k) => tr.appendChild(el("td", k < S.figures ? {class: "num"} : {}, v)));
    table.appendChild(tr);
  }
  box.appendChild(table);
}

document.getElementById("filter").addEventListener("input", (e) => { filterText = e.target.value; renderOps(); });
document.getElementById("subrows").addEventListener("change", renderOps);
renderOps();
renderChart();
renderScopes();
renderSteps();
renderMemory();
renderActions();
renderHosts();
document.body.setAttribute("data-ready", "1");
