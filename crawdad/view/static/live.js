// The live view: polls /live.json every 2 s and redraws the page's figures, without a reload.
// Every text from the data (model names, answers, run labels, server notes) goes into the page
// through textContent or an attribute set by setAttribute, never parsed as HTML.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toLocaleString("en-US", {
    maximumFractionDigits: digits, minimumFractionDigits: digits,
  });
}

function pct(x) {
  return x === null || x === undefined ? "–" : fmt(100 * x, 1) + "%";
}

function replace(parent, children) {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  for (const c of children) parent.appendChild(c);
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  return tr;
}

function progressCell(run) {
  const span = el("span");
  const bar = el("span", null, "bar");
  const fill = el("span");
  const share = run.selected ? Math.min(1, run.done / run.selected) : 0;
  fill.style.width = (100 * share).toFixed(1) + "%";
  bar.appendChild(fill);
  span.appendChild(bar);
  const text = el("span", run.selected
    ? `${fmt(run.done, 0)} / ${fmt(run.selected, 0)} (${fmt(100 * share, 1)}%)`
    : `${fmt(run.done, 0)} / ?`);
  text.className = "progress";
  text.dataset.run = run.label;
  span.appendChild(text);
  if (run.live) span.appendChild(el("b", " writing", "live"));
  return span;
}

function drawRuns(runs) {
  const rows = runs.map((run) => {
    const acc = run.accuracy === null ? "–"
      : `${pct(run.accuracy)} (${pct(run.interval[0])}–${pct(run.interval[1])}) of ${fmt(run.scored, 0)}`;
    const models = Object.entries(run.models || {}).map(([a, m]) => `${a}: ${m}`).join(", ");
    const errors = run.errors + (run.invalid_lines ? ` (+${run.invalid_lines} unreadable lines)` : "");
    return row([run.label, progressCell(run), fmt(run.debates_per_min, 1),
      fmt(run.tokens_per_s, 0), errors, fmt(run.retries, 0), fmt(run.loops, 0), acc, models]);
  });
  replace(document.getElementById("live-runs"), rows);
}

// A small line chart of the last hour: one polyline per series, the y axis from 0 to the
// largest value (or `top`), labelled with its unit; x: minutes before the newest sample.
function spark(title, unit, at, lines, top) {
  const W = 280, H = 70, L = 34, B = 14;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  const t1 = at.length ? at[at.length - 1] : 0;
  const t0 = Math.min(at.length ? at[0] : t1, t1 - 60);
  let ymax = top || 0;
  if (!top) for (const ln of lines) for (const v of ln.values) if (v !== null && v > ymax) ymax = v;
  if (ymax <= 0) ymax = 1;
  const x = (t) => L + (W - L - 4) * (t - t0) / Math.max(t1 - t0, 1);
  const y = (v) => 4 + (H - B - 6) * (1 - v / ymax);
  const label = (text, tx, ty, anchor) => {
    const node = document.createElementNS(SVG, "text");
    node.setAttribute("x", tx); node.setAttribute("y", ty);
    node.setAttribute("class", "axis");
    node.setAttribute("text-anchor", anchor);
    node.textContent = text;
    svg.appendChild(node);
  };
  const axis = document.createElementNS(SVG, "path");
  axis.setAttribute("d", `M${L},4 V${H - B} H${W - 4}`);
  axis.setAttribute("stroke", "#bbb"); axis.setAttribute("fill", "none");
  svg.appendChild(axis);
  label(fmt(ymax, ymax < 10 ? 1 : 0), L - 3, 12, "end");
  label("0", L - 3, H - B, "end");
  label(`−${fmt((t1 - t0) / 60, 0)} min`, L, H - 2, "start");
  label("now", W - 4, H - 2, "end");
  for (const ln of lines) {
    let d = "";
    let pen = "M";
    ln.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = "M"; return; }
      d += `${pen}${x(at[i]).toFixed(1)},${y(v).toFixed(1)} `;
      pen = "L";
    });
    if (!d) continue;
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", d);
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", ln.color);
    path.setAttribute("stroke-width", "1.5");
    svg.appendChild(path);
  }
  const box = el("div", null, "chart");
  const caption = el("div", null, "gauge");
  caption.appendChild(el("span", `${title} (${unit}): `));
  lines.forEach((ln, i) => {
    if (i) caption.appendChild(el("span", ", "));
    caption.appendChild(el("span", ln.name, ln.cls));
  });
  box.appendChild(caption);
  box.appendChild(svg);
  return box;
}

function gauge(name, value, unit) {
  const g = el("div", null, "gauge");
  g.appendChild(el("div", name));
  const b = el("b", value);
  g.appendChild(b);
  if (unit) g.appendChild(el("span", " " + unit));
  return g;
}

function drawServers(servers) {
  const host = document.getElementById("live-servers");
  if (!servers.length) return;
  const cards = servers.map((s) => {
    const card = el("div", null, "server-card");
    card.appendChild(el("h3", `${s.kind} at ${s.url}`));
    card.appendChild(el("div", `folder ${s.folder}` + (s.source ? `; read by ${s.source}` : ""), "hint"));
    if (s.note) card.appendChild(el("p", s.note, "hint"));
    if (!s.series) return card;
    const last = s.latest || {};
    const gauges = el("div", null, "gauges");
    gauges.appendChild(gauge("requests running", fmt(last.running, 0)));
    gauges.appendChild(gauge("requests waiting", fmt(last.waiting, 0)));
    gauges.appendChild(gauge("KV cache in use", fmt(last.kv_cache, 1), "%"));
    gauges.appendChild(gauge("generated", fmt(last.generated_per_s, 0), "tokens/s"));
    gauges.appendChild(gauge("crawdad's in flight", fmt(last.in_flight, 0)));
    card.appendChild(gauges);
    const sr = s.series;
    const charts = el("div", null, "gauges");
    charts.appendChild(spark("requests", "count", sr.at, [
      { name: "running", values: sr.running, color: "#1a5fb4", cls: "legend-running" },
      { name: "waiting", values: sr.waiting, color: "#D55E00", cls: "legend-waiting" },
    ]));
    charts.appendChild(spark("KV cache in use", "%", sr.at, [
      { name: "server", values: sr.kv_cache, color: "#6a3d9a", cls: "legend-kv" },
    ], 100));
    charts.appendChild(spark("tokens", "per second", sr.at, [
      { name: "generated (server)", values: sr.generated_per_s, color: "#009E73", cls: "legend-gen" },
      { name: "received (crawdad)", values: sr.received_per_s, color: "#777", cls: "legend-recv" },
    ]));
    card.appendChild(charts);
    return card;
  });
  const grid = el("div", null, "servers-grid");
  for (const c of cards) grid.appendChild(c);
  replace(host, [grid]);
}

// A variant's confidence sequence for its difference from the baseline: the band between its
// lower and upper bounds over the questions counted, with lines at 0 and at ±margin, and the
// place where the rule decided (a dashed line).
function band(d) {
  const W = 300, H = 90, L = 40, B = 14;
  const sq = d.sequence;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `confidence sequence of ${d.variant} minus ${d.baseline}`);
  const qmax = Math.max(1, sq.questions[sq.questions.length - 1]);
  let top = Math.max(2 * d.margin, 0.05);
  sq.lower.forEach((lo, i) => { top = Math.max(top, Math.abs(lo), Math.abs(sq.upper[i])); });
  top = Math.min(1, top);
  const x = (q) => L + (W - L - 4) * q / qmax;
  const y = (v) => 4 + (H - B - 8) * (1 - (Math.max(-top, Math.min(top, v)) + top) / (2 * top));
  const add = (tag, attrs) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    svg.appendChild(node);
    return node;
  };
  const label = (text, tx, ty, anchor) => {
    add("text", { x: tx, y: ty, class: "axis", "text-anchor": anchor }).textContent = text;
  };
  let d0 = "";
  sq.questions.forEach((q, i) => { d0 += `${i ? "L" : "M"}${x(q).toFixed(1)},${y(sq.upper[i]).toFixed(1)} `; });
  for (let i = sq.questions.length - 1; i >= 0; i--) {
    d0 += `L${x(sq.questions[i]).toFixed(1)},${y(sq.lower[i]).toFixed(1)} `;
  }
  add("path", { d: d0 + "Z", fill: "#1a5fb4", "fill-opacity": "0.25", stroke: "#1a5fb4", "stroke-width": "1" });
  add("path", { d: `M${L},${y(0).toFixed(1)} H${W - 4}`, stroke: "#444", fill: "none" });
  for (const m of [d.margin, -d.margin]) {
    add("path", { d: `M${L},${y(m).toFixed(1)} H${W - 4}`, stroke: "#D55E00", fill: "none", "stroke-dasharray": "2,2" });
  }
  if (d.decision !== "undecided" && d.decision !== "contradicted" && d.questions) {
    add("path", { d: `M${x(d.questions).toFixed(1)},4 V${H - B}`, stroke: "#009E73", fill: "none", "stroke-dasharray": "4,2" });
  }
  add("path", { d: `M${L},4 V${H - B} H${W - 4}`, stroke: "#bbb", fill: "none" });
  label(`+${fmt(100 * top, 0)} pts`, L - 3, 12, "end");
  label("0", L - 3, y(0) + 3, "end");
  label(`−${fmt(100 * top, 0)} pts`, L - 3, H - B, "end");
  label("0", L, H - 2, "start");
  label(`${fmt(qmax, 0)} questions`, W - 4, H - 2, "end");
  return svg;
}

function drawDecisions(decisions) {
  const section = document.getElementById("live-decisions-section");
  if (!section) return;
  section.hidden = !decisions || !decisions.length;
  if (section.hidden) return;
  const rows = decisions.map((d) => {
    const what = el("span", d.decision, "badge decision-" + String(d.decision));
    const open = d.decision === "undecided" || d.decision === "contradicted";
    const against = open ? "" : ` (vs ${d.baseline})`;
    const cell = el("span");
    cell.appendChild(what);
    cell.appendChild(el("span", against));
    cell.appendChild(el("div", `about ${d.target === "run" ? "this run" : "the models"}`, "hint"));
    if (d.reason) cell.appendChild(el("div", d.reason, "hint"));
    const interval = d.estimate === null ? "–"
      : `${fmt(100 * d.estimate, 1)} pts; ${d.interval || "–"}`;
    const used = d.decision === "undecided"
      ? `${fmt(d.settled, 0)} counted so far` : `after ${fmt(d.questions, 0)} of ${fmt(d.settled, 0)} counted`;
    const chart = d.sequence && d.sequence.questions.length ? band(d) : el("span", d.decision === "contradicted" ? "no interval: the sequence contradicted itself" : "no question settled yet", "hint");
    return row([d.label, cell, used, interval, chart]);
  });
  replace(document.getElementById("live-decisions"), rows);
}

function drawNewest(newest) {
  const rows = newest.map((d) => {
    const a = el("a", d.qid, "qid");
    a.setAttribute("href", `/debate/${encodeURIComponent(d.run).replace(/%2F/g, "/")}/${encodeURIComponent(d.qid)}`);
    const when = d.finished_at ? new Date(d.finished_at * 1000).toISOString().slice(11, 19) : "–";
    const outcome = el("span", d.outcome, "badge o-" + String(d.outcome).replace("->", ""));
    return row([when, d.run, a, outcome, `${d.final_answer ?? "none"} / ${d.gold ?? "no exact answer"}`,
      fmt(d.responses, 0), d.stop_reasons.join(", ") + (d.errored ? " (error)" : ""),
      fmt(d.tokens, 0), fmt(d.seconds, 1)]);
  });
  replace(document.getElementById("live-newest"), rows);
}

async function poll() {
  const state = document.getElementById("live-state");
  try {
    const r = await fetch("/live.json", { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const data = await r.json();
    drawRuns(data.runs);
    drawServers(data.servers);
    drawDecisions(data.decisions || []);
    drawNewest(data.newest);
    const writing = data.runs.some((x) => x.live);
    state.textContent = (writing ? "running" : "not being written") + ", updated " +
      new Date(data.now * 1000).toLocaleTimeString();
  } catch (e) {
    state.textContent = "cannot reach crawdad view (" + e.message + "); retrying";
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.getElementById("live-runs")) poll();
});
