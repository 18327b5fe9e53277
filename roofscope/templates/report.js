// roofscope report: draws the roofline, breakdowns, timeline and telemetry from the JSON
// block, and fills the tables. Names only ever reach the page as textContent, or escaped
// for plotly's labels (which render a subset of HTML).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("roofscope-data").textContent);
  const CLASSES = data.classes;
  const hasPlotly = typeof Plotly !== "undefined";
  const PLOT_CONFIG = {displaylogo: false, responsive: true};
  const ROOF_COLORS = {fp8: "#862e9c", int8: "#a61e4d", bf16: "#212529", fp16: "#495057", tf32: "#5f3dc4",
                       fp32: "#1864ab", fp64: "#0b7285"};

  // ---- formatting ------------------------------------------------------------------------
  const isNum = (v) => v !== null && v !== undefined && Number.isFinite(v);
  const g = (v, d = 3) => isNum(v) ? String(Number(Number(v).toPrecision(d))) : "-";
  const pct = (v) => isNum(v) ? (100 * v).toFixed(1) + "%" : "-";
  const SI = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  function si(v, unit = "", d = 3) {
    if (!isNum(v)) return "-";
    for (const [f, p] of SI) if (Math.abs(v) >= f) return g(v / f, d) + " " + p + unit;
    return (g(v, d) + " " + unit).trim();
  }
  // Log-axis ticks at powers of ten in one notation (plotly's own switch from "100B" to "10^15").
  function logTicks(lo, hi, unit) {
    const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi)), every = Math.ceil((b - a + 1) / 10);
    const vals = [];
    for (let e = a; e <= b; e++) if ((e - a) % every === 0) vals.push(Math.pow(10, e));
    return {tickmode: "array", tickvals: vals, ticktext: vals.map((v) => v >= 1000 ? si(v, unit) : g(v) + (unit ? " " + unit : ""))};
  }
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  function wrap(s, n = 110) {
    const out = [];
    for (let i = 0; i < s.length; i += n) out.push(esc(s.slice(i, i + n)));
    return out.join("<br>");
  }
  function noPlot(id) {
    const el = document.getElementById(id);
    if (!el) return;
    el.textContent = "plotly.js did not load (a report written with --cdn needs the network to draw its charts).";
    el.className = "plot-missing";
    el.style.height = "auto";
  }

  // ---- groups: sum the cells of one grouping under a step/region filter ------------------
  function info(mode, k) {
    const m = data.modes[mode], keys = m.keys;
    if (k === keys.kernel.length) return {other: true, name: keys.other.name};
    const kernel = data.kernels.name[keys.kernel[k]];
    return {other: false, name: keys.name ? keys.name[k] : kernel, kernel: kernel,
            kshort: data.kernels.short[keys.kernel[k]], op: keys.op[k], module: keys.module[k],
            region: keys.region[k], shapes: keys.shapes[k], dtype: keys.dtype[k], category: keys.category[k]};
  }

  function groups(mode, filter) {
    const m = data.modes[mode], c = m.cells, n = m.count, nc = CLASSES.length;
    const calls = new Float64Array(n), time = new Float64Array(n), flops = new Float64Array(n);
    const bytes = new Float64Array(n), floor = new Float64Array(n), clsT = new Float64Array(n * nc);
    // Time of the costed launches (cells with a floor time): rates divide by it, not by all time.
    const ctime = new Float64Array(n);
    const hasT = new Uint8Array(n), hasF = new Uint8Array(n), hasB = new Uint8Array(n), hasFl = new Uint8Array(n);
    // Hardware counters: measured L2 bytes, matmul time with and without tensor-core FLOPs.
    const l2 = new Float64Array(n), hasL2 = new Uint8Array(n), tc = new Float64Array(n), notc = new Float64Array(n);
    const firstCls = new Int32Array(n).fill(-1);
    let total = 0;
    for (let i = 0; i < c.g.length; i++) {
      if (filter.step !== null && c.step[i] !== filter.step) continue;
      if (filter.region !== null && c.region[i] !== filter.region) continue;
      const k = c.g[i];
      calls[k] += c.calls[i];
      if (firstCls[k] < 0) firstCls[k] = c.cls[i];
      if (c.time_ns[i] !== null) { time[k] += c.time_ns[i]; hasT[k] = 1; clsT[k * nc + c.cls[i]] += c.time_ns[i]; total += c.time_ns[i]; }
      if (c.flops[i] !== null) { flops[k] += c.flops[i]; hasF[k] = 1; }
      if (c.bytes[i] !== null) { bytes[k] += c.bytes[i]; hasB[k] = 1; }
      if (c.floor_ns[i] !== null) { floor[k] += c.floor_ns[i]; hasFl[k] = 1; if (c.time_ns[i] !== null) ctime[k] += c.time_ns[i]; }
      if (data.counters) {
        if (c.l2_bytes[i] !== null) { l2[k] += c.l2_bytes[i]; hasL2[k] = 1; }
        if (c.tc_ns[i] !== null) tc[k] += c.tc_ns[i];
        if (c.notc_ns[i] !== null) notc[k] += c.notc_ns[i];
      }
    }
    const rows = [];
    for (let k = 0; k < n; k++) {
      if (!calls[k]) continue;
      let cls = firstCls[k], best = 0;
      for (let j = 0; j < nc; j++) if (clsT[k * nc + j] > best) { best = clsT[k * nc + j]; cls = j; }
      const t = hasT[k] ? time[k] / 1e9 : null, f = hasF[k] ? flops[k] : null, b = hasB[k] ? bytes[k] : null;
      const ct = ctime[k] / 1e9;
      rows.push(Object.assign(info(mode, k), {
        k: k, calls: calls[k], time: t, mean: t !== null ? t / calls[k] : null, flops: f, bytes: b,
        intensity: f !== null && b ? f / b : null, achieved: f !== null && ct ? f / ct : null,
        bw: b !== null && ct ? b / ct : null, eff: hasFl[k] && ct ? floor[k] / 1e9 / ct : null,
        coverage: t ? ct / t : null,
        l2: hasL2[k] ? l2[k] : null, l2intensity: f !== null && hasL2[k] && l2[k] ? f / l2[k] : null,
        tc: tc[k] && notc[k] ? "partly" : tc[k] ? "yes" : notc[k] ? "NO" : "",
        cls: CLASSES[cls], share: t !== null && total > 0 ? time[k] / total : null}));
    }
    rows.sort((a, b) => ((b.time ?? -1) - (a.time ?? -1)) || ((b.flops ?? -1) - (a.flops ?? -1)));
    return rows;
  }

  // ---- controls ----------------------------------------------------------------------------
  const state = {mode: "kernel", filter: {step: null, region: null}, filterLabel: "all"};
  const groupBy = document.getElementById("group-by"), filterSel = document.getElementById("filter");
  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = value; o.textContent = text; select.appendChild(o);
  }
  for (const [mode, m] of Object.entries(data.modes)) option(groupBy, mode, m.label);
  option(filterSel, "all", "all steps and regions");
  for (const s of data.steps) option(filterSel, "s:" + s, "step " + s);
  if (data.steps_merged) {
    option(filterSel, "", "(" + data.steps_merged + " steps: too many to filter by)");
    filterSel.lastChild.disabled = true;
  }
  if (data.regions.length > 1 || (data.regions.length === 1 && data.regions[0] !== "")) {
    data.regions.forEach((r, i) => option(filterSel, "r:" + i, r === "" ? "outside any region" : "region " + r));
  }

  // ---- roofline ------------------------------------------------------------------------------
  function hoverText(p) {
    const lines = ["<b>" + wrap(p.name) + "</b>"];
    if (state.mode !== "kernel") lines.push("longest kernel: " + esc(p.kshort));
    const where = [];
    if (state.mode !== "op" && p.op) where.push("op " + esc(p.op));
    if (p.module) where.push("module " + esc(p.module));
    if (p.region) where.push("region " + esc(p.region));
    if (where.length) lines.push(where.join(" · "));
    if (p.shapes) lines.push("shapes " + esc(p.shapes) + (p.dtype ? " (" + esc(p.dtype) + ")" : ""));
    lines.push(p.calls.toLocaleString("en-US") + " calls · total " + (p.time * 1e3).toFixed(3) + " ms (" + pct(p.share) +
               ") · mean " + g(p.mean * 1e6) + " µs");
    lines.push(si(p.flops, "FLOP") + ", " + si(p.bytes, "B") + " · " + g(p.intensity) + " FLOP/B" +
               (data.counters ? " (DRAM)" : ""));
    if (p.l2intensity !== null && p.l2intensity !== undefined) {
      lines.push("L2: " + si(p.l2, "B") + " · " + g(p.l2intensity) + " FLOP/B" + (p.tc ? " · tensor cores " + p.tc : ""));
    }
    lines.push(si(p.achieved, "FLOP/s") + ", " + si(p.bw, "B/s") + " · efficiency " + pct(p.eff) + " · " + esc(p.cls));
    return lines.join("<br>");
  }

  function rooflinePlot(rows) {
    const pts = rows.filter((r) => !r.other && r.flops > 0 && r.bytes > 0 && r.time > 0);
    const roofs = data.roofs.map((r) => [r, false]).concat(data.datasheet_roofs.map((r) => [r, true]));
    const l2pts = data.counters ? pts.filter((p) => p.l2intensity > 0) : [];
    const xs = pts.map((p) => p.intensity).concat(roofs.map(([r]) => r.ridge), l2pts.map((p) => p.l2intensity));
    const lo = xs.length ? Math.min(...xs) / 4 : 1e-2, hi = xs.length ? Math.max(...xs) * 4 : 1e4;
    const peaks = roofs.map(([r]) => r.peak), ys = pts.map((p) => p.achieved);
    const yhi = Math.max(...peaks, ...ys, 1) * 2;
    const ylo = Math.min(...ys, yhi / 1e5) / 4;
    const traces = [];
    for (const [r, dashed] of roofs) {
      const x = [lo, r.ridge, hi], label = r.precision + (dashed ? " datasheet" : " roof");
      traces.push({type: "scatter", mode: "lines", name: label, meta: "roof", x: x,
                   y: x.map((v) => Math.min(r.peak, v * r.bandwidth)),
                   line: {width: dashed ? 1.2 : 2.2, dash: dashed ? "dash" : "solid", color: ROOF_COLORS[r.precision] || "#212529"},
                   hovertemplate: esc(label) + ": %{y:.3s}FLOP/s at %{x:.3g} FLOP/B<extra></extra>"});
    }
    if (roofs.length) {
      traces.push({type: "scatter", mode: "markers", name: "ridge points", meta: "ridge", showlegend: false,
                   x: roofs.map(([r]) => r.ridge), y: roofs.map(([r]) => r.peak),
                   marker: {symbol: "diamond", size: 9, color: roofs.map(([r]) => ROOF_COLORS[r.precision] || "#212529")},
                   hovertext: roofs.map(([r, d]) => esc(r.precision) + (d ? " datasheet" : "") + " ridge: " + g(r.ridge) +
                                        " FLOP/B, " + si(r.peak, "FLOP/s")),
                   hovertemplate: "%{hovertext}<extra></extra>"});
    }
    for (const lv of (data.levels || [])) {
      if (!roofs.length) break;
      const top = Math.max(...peaks), x = [lo, top / lv.bandwidth, hi];
      traces.push({type: "scatter", mode: "lines", name: lv.name + " bandwidth", meta: "roof", x: x,
                   y: x.map((v) => Math.min(top, v * lv.bandwidth)), line: {width: 1.2, dash: "dot", color: "#868e96"},
                   hovertemplate: esc(lv.name) + " " + si(lv.bandwidth, "B/s") + ": %{y:.3s}FLOP/s at %{x:.3g} FLOP/B<extra></extra>"});
    }
    if (data.l2_bandwidth && roofs.length) {
      const top = Math.max(...peaks), x = [lo, top / data.l2_bandwidth, hi];
      traces.push({type: "scatter", mode: "lines", name: "L2 bandwidth", meta: "roof", x: x,
                   y: x.map((v) => Math.min(top, v * data.l2_bandwidth)), line: {width: 1.2, dash: "dot", color: "#495057"},
                   hovertemplate: "L2 " + si(data.l2_bandwidth, "B/s") + ": %{y:.3s}FLOP/s at %{x:.3g} FLOP/B<extra></extra>"});
    }
    const maxT = Math.max(...pts.map((p) => p.time), 1e-15);
    const size = (p) => Math.max(5, 52 * Math.sqrt(p.time / maxT));
    if (l2pts.length) {
      // The same groups at their L2 intensity (FLOPs / measured L2 bytes): hollow markers.
      traces.push({type: "scatter", mode: "markers", name: "L2 intensity", meta: "l2", x: l2pts.map((p) => p.l2intensity),
                   y: l2pts.map((p) => p.achieved), customdata: l2pts.map((p) => p.k),
                   marker: {symbol: "circle-open", line: {width: 1.5}, size: l2pts.map(size),
                            color: l2pts.map((p) => data.colors[p.cls] || "#495057")},
                   hovertext: l2pts.map(hoverText), hovertemplate: "%{hovertext}<extra></extra>"});
    }
    for (const cls of CLASSES) {
      const ps = pts.filter((p) => p.cls === cls);
      if (!ps.length) continue;
      traces.push({type: "scatter", mode: "markers", name: cls, meta: "groups",
                   x: ps.map((p) => p.intensity), y: ps.map((p) => p.achieved), customdata: ps.map((p) => p.k),
                   // Area proportional to time (diameter to its square root), 5 px at least to stay visible.
                   marker: {color: data.colors[cls] || "#495057", opacity: 0.78, line: {width: 1, color: "#fff"},
                            size: ps.map(size)},
                   hovertext: ps.map(hoverText), hovertemplate: "%{hovertext}<extra></extra>"});
    }
    const layout = {
      xaxis: Object.assign({type: "log", title: {text: "arithmetic intensity (FLOP/byte)"},
                            range: [Math.log10(lo), Math.log10(hi)]}, logTicks(lo, hi, "")),
      yaxis: Object.assign({type: "log", title: {text: "achieved FLOP/s"}, range: [Math.log10(ylo), Math.log10(yhi)]},
                           logTicks(ylo, yhi, "FLOP/s")),
      margin: {t: 10, r: 10}, legend: {orientation: "h", itemsizing: "constant"}, hovermode: "closest",
      hoverlabel: {align: "left"}};
    const drawn = new Set(pts), hidden = rows.filter((r) => !drawn.has(r));
    const hiddenTime = hidden.reduce((s, r) => s + (r.share || 0), 0);
    document.getElementById("roofline-note").textContent = pts.length + " of " + rows.length + " groups drawn" +
      (hidden.length ? "; left out: " + hidden.length + " without FLOPs or bytes" +
        (rows.some((r) => r.other) ? " or folded into one" : "") + " (" + pct(hiddenTime) + " of the time)" : "");
    return Plotly.react("roofline-plot", traces, layout, PLOT_CONFIG);
  }

  // ---- tables --------------------------------------------------------------------------------
  const MAX_ROWS = 300;
  const num = (key, label, fmt, csv) => ({key, label, fmt, csv: csv || key, text: false});
  const txt = (key, label, cls) => ({key, label, fmt: (r) => r[key] || "", csv: key, text: true, cls: cls || "txt"});
  const NUMBERS = [
    txt("cls", "class"), num("calls", "calls", (r) => r.calls.toLocaleString("en-US")),
    num("time", "time ms", (r) => isNum(r.time) ? (r.time * 1e3).toFixed(3) : "-", "time_s"),
    num("share", "share", (r) => pct(r.share), "time_share"),
    num("mean", "mean µs", (r) => g(isNum(r.mean) ? r.mean * 1e6 : null), "mean_s"),
    num("flops", "FLOPs", (r) => si(r.flops)), num("bytes", "bytes", (r) => si(r.bytes, "B")),
    num("intensity", "FLOP/B", (r) => g(r.intensity)),
    num("achieved", "FLOP/s", (r) => si(r.achieved), "achieved_flops"),
    num("bw", "bandwidth", (r) => si(r.bw, "B/s"), "achieved_bw"),
    num("eff", "efficiency", (r) => pct(r.eff), "efficiency"),
    num("coverage", "costed", (r) => pct(r.coverage), "coverage")];

  function csvCell(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") return Number.isFinite(v) ? String(v) : "";
    let s = String(v);
    // A leading = + - @ makes spreadsheets evaluate the cell: keep names inert.
    if (/^[=+\-@\t\r]/.test(s)) s = "'" + s;
    return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }
  function download(name, text) {
    const url = URL.createObjectURL(new Blob([text], {type: "text/csv;charset=utf-8"}));
    const a = document.createElement("a");
    a.href = url; a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  function makeTable(id, mode, columns) {
    const table = document.getElementById(id + "-table"), input = document.getElementById(id + "-filter");
    const count = document.getElementById(id + "-count");
    const t = {rows: [], shown: [], sortKey: "time", desc: true, query: ""};
    const headRow = document.createElement("tr");
    for (const col of columns) {
      const th = document.createElement("th");
      th.textContent = col.label; th.dataset.key = col.key;
      if (col.hint) th.title = col.hint;
      if (col.text) th.className = col.cls;
      th.addEventListener("click", () => {
        t.desc = t.sortKey === col.key ? !t.desc : !col.text;
        t.sortKey = col.key;
        render();
      });
      headRow.appendChild(th);
    }
    table.tHead.appendChild(headRow);
    function matches(r) {
      if (!t.query) return true;
      return columns.some((c) => c.text && String(r[c.key] || "").toLowerCase().includes(t.query));
    }
    function render() {
      const col = columns.find((c) => c.key === t.sortKey), dir = t.desc ? -1 : 1;
      t.shown = t.rows.filter(matches).sort((a, b) => {
        const x = a[t.sortKey], y = b[t.sortKey];
        if (x === null || x === undefined || x === "") return (y === null || y === undefined || y === "") ? 0 : 1;
        if (y === null || y === undefined || y === "") return -1;
        return (col.text ? String(x).localeCompare(String(y)) : x - y) * dir;
      });
      for (const th of headRow.children) {
        if (th.dataset.key === t.sortKey) th.setAttribute("aria-sort", t.desc ? "descending" : "ascending");
        else th.removeAttribute("aria-sort");
      }
      const body = document.createElement("tbody");
      for (const r of t.shown.slice(0, MAX_ROWS)) {
        const tr = document.createElement("tr");
        for (const c of columns) {
          const td = document.createElement("td");
          td.textContent = c.fmt(r);
          if (c.text) td.className = c.cls;
          if (c.title) td.title = r[c.title];
          tr.appendChild(td);
        }
        body.appendChild(tr);
      }
      table.replaceChild(body, table.tBodies[0]);
      count.textContent = t.shown.length.toLocaleString("en-US") + " rows" +
        (t.shown.length > MAX_ROWS ? " (first " + MAX_ROWS + " shown; the CSV has all)" : "");
    }
    input.addEventListener("input", () => { t.query = input.value.trim().toLowerCase(); render(); });
    document.getElementById(id + "-csv").addEventListener("click", () => {
      const lines = [columns.map((c) => c.csv).join(",")];
      for (const r of t.shown) lines.push(columns.map((c) => csvCell(r[c.key])).join(","));
      download("roofscope-" + id + (state.filterLabel === "all" ? "" : "-" + state.filterLabel) + ".csv", lines.join("\n") + "\n");
    });
    return {
      update(filter) { t.rows = groups(mode, filter); render(); },
      search(q) { input.value = q; t.query = q.toLowerCase(); render(); },
    };
  }

  // Kernel names are C++ signatures: the cell shows the short form, the full one on hover and in the CSV.
  const kernelName = Object.assign(txt("name", data.cpu_only ? "CPU op" : "kernel", "name"),
                                   {fmt: (r) => r.other ? r.name : r.kshort, title: "name"});
  const LONGEST = "of the group's longest call";
  const kernelCols = [kernelName, Object.assign(txt("op", "op"), {hint: LONGEST})];
  if (data.modes.module) kernelCols.push(Object.assign(txt("module", "module"), {hint: LONGEST}));
  if (data.counters) kernelCols.push(Object.assign(txt("tc", "tensor cores"),
                                                   {hint: "matmul time with tensor-core FLOPs (hardware counters)"}));
  const tables = [makeTable("kernels", "kernel", kernelCols.concat(NUMBERS)),
                  makeTable("ops", "op", [txt("name", "op", "name"), txt("kshort", "longest kernel")].concat(NUMBERS))];
  document.querySelectorAll("a.kernel-link").forEach((a) => a.addEventListener("click", () => tables[0].search(a.dataset.filter)));

  function update() {
    tables.forEach((t) => t.update(state.filter));
    if (!hasPlotly) return Promise.resolve();
    return rooflinePlot(groups(state.mode, state.filter));
  }
  groupBy.addEventListener("change", () => { state.mode = groupBy.value; update(); });
  filterSel.addEventListener("change", () => {
    const v = filterSel.value;
    state.filter = {step: v.startsWith("s:") ? Number(v.slice(2)) : null, region: v.startsWith("r:") ? Number(v.slice(2)) : null};
    state.filterLabel = v.replace(":", "");
    update();
  });

  // ---- per step, timeline, telemetry ---------------------------------------------------------
  function stepsPlot() {
    const ps = data.per_step, by = document.getElementById("steps-by").value;
    const x = ps.steps.map((s) => "step " + s);
    const colors = by === "classes" ? data.colors : data.category_colors;
    const traces = Object.entries(ps[by]).map(([name, ms]) => ({
      type: "bar", name: name, x: x, y: ms, marker: {color: colors[name] || "#868e96"},
      hovertemplate: esc(name) + ": %{y:.3f} ms<extra></extra>"}));
    traces.push({type: "scatter", mode: "lines+markers", name: "step wall time", x: x, y: ps.wall_ms,
                 line: {color: "#212529"}, hovertemplate: "wall %{y:.3f} ms<extra></extra>"});
    if (ps.busy_ms) traces.push({type: "scatter", mode: "lines+markers", name: "GPU busy", x: x, y: ps.busy_ms,
                                 line: {color: "#868e96", dash: "dot"}, hovertemplate: "busy %{y:.3f} ms<extra></extra>"});
    return Plotly.react("steps-plot", traces, {barmode: "stack", yaxis: {title: {text: "ms"}, rangemode: "tozero"},
                                               margin: {t: 10, r: 10}, legend: {orientation: "h", traceorder: "normal"}},
                      PLOT_CONFIG);
  }

  function timelinePlot() {
    const tl = data.timeline, traces = [];
    CLASSES.forEach((cls, ci) => {
      const idx = [];
      tl.cls.forEach((c, i) => { if (c === ci) idx.push(i); });
      if (!idx.length) return;
      traces.push({type: "bar", orientation: "h", name: cls, marker: {color: data.colors[cls]},
                   y: idx.map((i) => tl.lanes[tl.lane[i]]), base: idx.map((i) => tl.start_us[i] / 1e3),
                   x: idx.map((i) => tl.dur_us[i] / 1e3), width: 0.7,
                   hovertext: idx.map((i) => "<b>" + esc(tl.names[tl.name[i]]) + "</b><br>op " + esc(tl.ops[tl.op[i]]) + "<br>" +
                                             g(tl.dur_us[i], 4) + " µs at " + g(tl.start_us[i] / 1e3, 5) + " ms · " + cls),
                   hovertemplate: "%{hovertext}<extra></extra>"});
    });
    return Plotly.react("timeline-plot", traces, {
      barmode: "overlay", xaxis: {title: {text: "ms from the step's start"}},
      yaxis: {type: "category", autorange: "reversed", categoryorder: "array", categoryarray: tl.lanes},
      margin: {t: 30, r: 10, l: 110}, legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom"}, hovermode: "closest"},
      PLOT_CONFIG);
  }

  function telemetryPlot() {
    const tel = data.telemetry, traces = [], shapes = [];
    const rows = [["sm_clock_mhz", "SM clock MHz", "y"], ["power_w", "power W", "y2"],
                  ["temp_c", "temperature °C", "y3"], ["gpu_util_pct", "GPU util %", "y4"]];
    const palette = ["#1971c2", "#2b8a3e", "#e8590c", "#7048e8", "#c2255c", "#0c8599", "#5c940d", "#862e9c"];
    tel.devices.forEach((d, di) => {
      const label = "GPU " + (d.index ?? di), color = palette[di % palette.length];
      for (const [key, name, axis] of rows) {
        traces.push({type: "scatter", mode: "lines", x: d.t_s, y: d[key], yaxis: axis, name: label, legendgroup: label,
                     showlegend: axis === "y", line: {color: color, width: 1.5},
                     hovertemplate: esc(label) + " " + name + ": %{y}<br>%{x:.3f} s<extra></extra>"});
      }
      if (d.events.t_s.length) {
        traces.push({type: "scatter", mode: "markers", x: d.events.t_s, y: d.events.t_s.map(() => d.max_sm_clock_mhz),
                     yaxis: "y", name: label + " throttle", legendgroup: label,
                     marker: {symbol: "x", color: "#c92a2a", size: 7}, hovertext: d.events.reasons.map(esc),
                     hovertemplate: "%{hovertext}<br>%{x:.3f} s<extra></extra>"});
      }
      if (d.max_sm_clock_mhz) shapes.push({type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: d.max_sm_clock_mhz,
                                           y1: d.max_sm_clock_mhz, line: {dash: "dash", width: 1, color: color}});
      if (d.power_limit_w) shapes.push({type: "line", xref: "paper", x0: 0, x1: 1, yref: "y2", y0: d.power_limit_w,
                                        y1: d.power_limit_w, line: {dash: "dash", width: 1, color: color}});
    });
    if (tel.window) shapes.push({type: "rect", xref: "x", yref: "paper", x0: tel.window[0], x1: tel.window[1], y0: 0, y1: 1,
                                 fillcolor: "rgba(25, 113, 194, 0.12)", line: {width: 0}, layer: "below"});
    const layout = {shapes: shapes, margin: {t: 10, r: 10}, legend: {orientation: "h"}, hovermode: "closest",
                    xaxis: {anchor: "y4", title: {text: "seconds from the " + tel.origin}}};
    rows.forEach(([, name, axis], i) => {
      layout[axis === "y" ? "yaxis" : "yaxis" + axis.slice(1)] = {title: {text: name, font: {size: 11}},
        domain: [1 - (i + 1) * 0.25 + 0.03, 1 - i * 0.25], anchor: "x", rangemode: "tozero"};
    });
    return Plotly.react("telemetry-plot", traces, layout, PLOT_CONFIG);
  }

  const pending = [update()];
  if (hasPlotly) {
    if (data.per_step) {
      pending.push(stepsPlot());
      document.getElementById("steps-by").addEventListener("change", stepsPlot);
    }
    if (data.timeline) pending.push(timelinePlot());
    if (data.telemetry) pending.push(telemetryPlot());
  } else {
    ["roofline-plot", "steps-plot", "timeline-plot", "telemetry-plot"].forEach(noPlot);
  }
  Promise.all(pending).then(() => {
    // Browser tests and the screenshot script wait for this.
    window.roofscopeRenderMs = performance.now();
    document.body.dataset.ready = "1";
  });
})();
