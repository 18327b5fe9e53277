// roofscope job report: step time per rank, per-rank time split and the per-rank roofline,
// drawn from the JSON block. Names reach plotly escaped (its labels render a subset of HTML).
(function () {
  "use strict";
  const d = JSON.parse(document.getElementById("roofscope-data").textContent);
  if (typeof Plotly === "undefined") return;
  const CONFIG = {displaylogo: false, responsive: true};
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const PALETTE = ["#1971c2", "#2b8a3e", "#e8590c", "#862e9c", "#0c8599", "#c2255c", "#5c940d", "#f08c00",
                   "#364fc7", "#a61e4d", "#087f5b", "#d9480f"];
  const color = (i) => PALETTE[i % PALETTE.length];
  const ranks = Object.keys(d.step_ms);

  // Synchronous data-parallel steps end together, so step time alone hides a straggler: the dashed
  // own-work (self) line of the rank the others wait for sits above the rest.
  const width = (r) => (d.stragglers.includes(Number(r)) ? 3 : 1.5);
  Plotly.newPlot("steps-plot", ranks.flatMap((r, i) => [
    {x: d.steps, y: d.step_ms[r], name: "rank " + r + " step", mode: "lines+markers",
     line: {color: color(i), width: width(r)}},
    {x: d.steps, y: d.self_ms[r] || [], name: "rank " + r + " own work", mode: "lines",
     line: {color: color(i), width: width(r), dash: "dash"}},
  ]), {margin: {t: 10, r: 10}, xaxis: {title: {text: "step"}}, yaxis: {title: {text: "ms"}}}, CONFIG);

  const sp = d.split;
  Plotly.newPlot("split-plot", Object.keys(sp.series).map((k) => ({
    type: "bar", x: sp.ranks.map((r) => "rank " + r), y: sp.series[k], name: k, marker: {color: d.split_colors[k]},
  })), {barmode: "stack", margin: {t: 10, r: 10}, yaxis: {title: {text: "ms per step (median)"}}}, CONFIG);

  const rl = d.roofline;
  const sel = document.getElementById("rank-select");
  const names = Object.keys(rl.ranks);
  for (const r of ["all"].concat(names)) {
    const o = document.createElement("option");
    o.value = r;
    o.textContent = r === "all" ? "all ranks" : "rank " + r;
    sel.appendChild(o);
  }
  function roofline() {
    const shown = sel.value === "all" ? names : [sel.value];
    let xmin = 1e-2, xmax = 1e4;
    const traces = shown.map((r) => {
      const p = rl.ranks[r];
      return {x: p.x, y: p.y, mode: "markers", type: "scatter", name: "rank " + r,
              marker: {color: color(names.indexOf(r)), size: p.ms.map((m) => 5 + 3 * Math.sqrt(Math.max(m, 0))),
                       opacity: 0.7},
              text: p.name.map((n, i) => esc(n.slice(0, 120)) + "<br>" + p.ms[i] + " ms, " + esc(p.cls[i])),
              hoverinfo: "text"};
    });
    for (const roof of rl.roofs) {
      traces.push({x: [xmin, roof.ridge, xmax], y: [xmin * rl.bandwidth, roof.peak, roof.peak], mode: "lines",
                   name: roof.precision + " roof", line: {color: "#868e96", width: 1}, hoverinfo: "name"});
    }
    Plotly.react("roofline-plot", traces, {margin: {t: 10, r: 10}, xaxis: {type: "log", title: {text: "FLOP/byte"}},
      yaxis: {type: "log", title: {text: "FLOP/s"}}}, CONFIG);
  }
  sel.addEventListener("change", roofline);
  roofline();
  document.body.dataset.ready = "1";   // for headless checks: everything is drawn
})();
