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

// A difference in points with its sign: "+12.5", "-3.0", "0.0".
function signed(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const s = fmt(Math.abs(x), digits);
  if (Number(s.replace(/,/g, "")) === 0) return s;
  return (x > 0 ? "+" : "-") + s;
}

// The smallest "nice" number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at or above x.
function niceCeil(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= x * (1 - 1e-9)) return m * p;
  return 10 * p;
}

// An axis value short enough for a small chart's margin: 950, 1.5k, 12k, 1.2M.
function compact(x) {
  const a = Math.abs(x);
  if (a >= 1e6) return fmt(x / 1e6, a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return fmt(x / 1e3, a >= 1e4 ? 0 : 1) + "k";
  return fmt(x, a < 10 && a !== Math.round(a) ? 1 : 0);
}

// Every time on the page is shown the same way: 24-hour, UTC, and says so.
function utcTime(t) {
  return new Date(t * 1000).toISOString().slice(11, 19);
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
  if (run.state) span.appendChild(el("b", " " + run.state, stateClass(run.state)));
  return span;
}

function stateClass(state) {
  return state.startsWith("decided") ? "decided" : state === "writing" ? "live" : "hint";
}

// The header's chips (drawn by the server at page load) follow each poll: the debates written
// and the run's state now.
function drawChips(runs) {
  for (const run of runs) {
    const chip = document.querySelector(`.run-chip[data-run="${CSS.escape(run.label)}"]`);
    if (!chip) continue;
    const count = chip.querySelector(".chip-count");
    if (count) count.textContent = fmt(run.done, 0);
    const state = chip.querySelector(".chip-state");
    if (state) {
      state.textContent = run.state ? " " + run.state : "";
      state.className = "chip-state " + (run.state ? stateClass(run.state) : "");
    }
  }
}

function drawRuns(runs) {
  const rows = runs.map((run) => {
    const acc = run.accuracy === null ? "–"
      : run.interval === null ? `${pct(run.accuracy)} ${run.accuracy_of}${run.interval_note ? " (" + run.interval_note + ")" : ""}`
      : `${pct(run.accuracy)} (${pct(run.interval[0])}–${pct(run.interval[1])}) ${run.accuracy_of}`;
    const models = Object.entries(run.models || {}).map(([a, m]) => `${a}: ${m}`).join(", ");
    const errors = run.errors + (run.invalid_lines ? ` (+${run.invalid_lines} unreadable lines)` : "");
    const who = el("span");
    who.appendChild(el("span", run.label));
    if (models) who.appendChild(el("div", models, "hint models"));
    return row([who, progressCell(run), fmt(run.debates_per_min, 1),
      fmt(run.tokens_per_s, 0), errors, fmt(run.retries, 0), fmt(run.loops, 0), acc]);
  });
  replace(document.getElementById("live-runs"), rows);
}

// A small line chart of the last hour: one polyline per series, the y axis from 0 to the
// largest value (or `top`), labelled with its unit; x: minutes before the newest sample.
function spark(title, unit, at, lines, top) {
  const W = 280, H = 70, B = 14;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${title} (${unit}), the last hour`);
  const t1 = at.length ? at[at.length - 1] : 0;
  const t0 = Math.min(at.length ? at[0] : t1, t1 - 60);
  let ymax = top || 0;
  if (!top) for (const ln of lines) for (const v of ln.values) if (v !== null && v > ymax) ymax = v;
  ymax = top || niceCeil(ymax);
  const topLabel = compact(ymax);
  // The left margin fits the top label (about 6 px a character at the axis font).
  const L = Math.max(24, 6 * topLabel.length + 8);
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
  label(topLabel, L - 3, 12, "end");
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

// What each of a server's own figures is called on its card.
const FIGURES = [
  ["running", "requests running"],
  ["waiting", "requests waiting"],
  ["kv_cache", "KV cache in use"],
  ["generated_per_s", "tokens generated per second"],
];

function has(values) {
  return (values || []).some((v) => v !== null && v !== undefined);
}

function gib(bytes) {
  return bytes === null || bytes === undefined ? "–" : fmt(bytes / 2 ** 30, 1) + " GiB";
}

// Which of its figures a server did not give, said on its card in place of dashes and empty
// charts. Ollama publishes no queue, cache or token counter: its GET /api/ps lists only the models
// loaded, which the card shows instead.
function missingNote(s, missing) {
  if (!missing.length) return null;
  const names = missing.map(([, name]) => name).join(", ");
  if (s.kind === "Ollama") {
    return `Ollama publishes no metrics of its queue, KV cache or tokens: its GET /api/ps lists only ` +
      `the models loaded. So this card has no ${names}; crawdad's own requests in flight and the ` +
      `tokens it received are shown.`;
  }
  return `${s.source || "this server"} gave no ${names}: not shown.`;
}

function loadedModels(models) {
  const names = Object.keys(models || {});
  if (!names.length) return null;
  const table = el("table", null, "debates compact loaded");
  const head = el("tr");
  for (const h of ["model loaded (GET /api/ps)", "in VRAM", "context (tokens)"]) head.appendChild(el("th", h));
  table.appendChild(head);
  for (const name of names) {
    const m = models[name];
    table.appendChild(row([name, gib(m.size_vram), fmt(m.context_length, 0)]));
  }
  return table;
}

function drawServers(servers) {
  const host = document.getElementById("live-servers");
  if (!servers.length) return;
  const cards = servers.map((s) => {
    const card = el("div", null, "server-card");
    card.appendChild(el("h3", `${s.kind} at ${s.url}`));
    const sr = s.series;
    const newest = sr && sr.at.length ? `; newest sample ${utcTime(sr.at[sr.at.length - 1])} UTC` : "";
    card.appendChild(el("div", `folder ${s.folder}` + (s.source ? `; read by ${s.source}` : "") + newest, "hint"));
    if (s.note) card.appendChild(el("p", s.note, "hint"));
    if (!sr) return card;
    const missing = FIGURES.filter(([key]) => !has(sr[key]));
    const shown = (key) => !missing.some(([k]) => k === key);
    const note = missingNote(s, missing);
    if (note) card.appendChild(el("p", note, "note"));
    const models = loadedModels(s.models);
    if (models) card.appendChild(models);
    const last = s.latest || {};
    const gauges = el("div", null, "gauges");
    if (shown("running")) gauges.appendChild(gauge("requests running", fmt(last.running, 0)));
    if (shown("waiting")) gauges.appendChild(gauge("requests waiting", fmt(last.waiting, 0)));
    if (shown("kv_cache")) gauges.appendChild(gauge("KV cache in use", fmt(last.kv_cache, 1), "%"));
    if (shown("generated_per_s")) gauges.appendChild(gauge("generated", fmt(last.generated_per_s, 0), "tokens/s"));
    gauges.appendChild(gauge("crawdad's in flight", fmt(last.in_flight, 0)));
    card.appendChild(gauges);
    const charts = el("div", null, "gauges");
    const requests = [];
    if (shown("running")) requests.push({ name: "running", values: sr.running, color: "#1a5fb4", cls: "legend-running" });
    if (shown("waiting")) requests.push({ name: "waiting", values: sr.waiting, color: "#D55E00", cls: "legend-waiting" });
    if (!requests.length) requests.push({ name: "crawdad's in flight", values: sr.in_flight, color: "#1a5fb4", cls: "legend-running" });
    charts.appendChild(spark("requests", "count", sr.at, requests));
    if (shown("kv_cache")) {
      charts.appendChild(spark("KV cache in use", "%", sr.at, [
        { name: "server", values: sr.kv_cache, color: "#6a3d9a", cls: "legend-kv" },
      ], 100));
    }
    const tokens = [];
    if (shown("generated_per_s")) tokens.push({ name: "generated (server)", values: sr.generated_per_s, color: "#009E73", cls: "legend-gen" });
    tokens.push({ name: "received (crawdad)", values: sr.received_per_s, color: "#777", cls: "legend-recv" });
    charts.appendChild(spark("tokens", "per second", sr.at, tokens));
    card.appendChild(charts);
    return card;
  });
  const grid = el("div", null, "servers-grid");
  for (const c of cards) grid.appendChild(c);
  replace(host, [grid]);
}

// A variant's confidence sequence for its difference from the baseline, in points: the band
// between its lower and upper bounds over the questions counted, the ±margin zone (orange,
// shaded), 0, and the place where the rule decided (green, dashed). The vertical scale is
// matplotlib's "symlog": linear within ±margin, logarithmic beyond, so that a 3-point margin
// stays apart from 0 beside the first questions' ±100-point bounds, and nothing is cut. Both
// ends of the band now are labelled, signed, at its right.
function band(d) {
  const W = 300, H = 110, L = 54, R = 46, B = 14, T = 6;
  const sq = d.sequence;
  const n = sq.questions.length;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("class", "spark band");
  svg.setAttribute("role", "img");
  const lo = 100 * sq.lower[n - 1], hi = 100 * sq.upper[n - 1];
  svg.setAttribute("aria-label", `confidence sequence of ${d.variant} minus ${d.baseline}: ` +
    `${signed(lo, 1)} to ${signed(hi, 1)} points after ${sq.questions[n - 1]} questions`);
  const qmax = Math.max(1, sq.questions[n - 1]);
  const margin = 100 * d.margin;
  const lin = margin > 0 ? margin : 1;  // the linear part of the scale
  let widest = 2 * lin;
  sq.lower.forEach((v, i) => { widest = Math.max(widest, Math.abs(100 * v), Math.abs(100 * sq.upper[i])); });
  const top = Math.min(100, niceCeil(widest));
  const f = (v) => Math.sign(v) * (Math.abs(v) <= lin ? Math.abs(v) / lin : 1 + Math.log10(Math.abs(v) / lin));
  const x = (q) => L + (W - L - R) * q / qmax;
  const y = (v) => T + (H - B - T - 2) * (1 - (f(Math.max(-top, Math.min(top, v))) / f(top) + 1) / 2);
  const add = (tag, attrs) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    svg.appendChild(node);
    return node;
  };
  const label = (text, tx, ty, anchor, cls) => {
    add("text", { x: tx, y: ty, class: cls || "axis", "text-anchor": anchor }).textContent = text;
  };
  const xr = W - R;
  add("rect", { x: L, y: y(margin).toFixed(1), width: xr - L,
    height: Math.max(1, y(-margin) - y(margin)).toFixed(1), class: "margin-zone" });
  let d0 = "";
  sq.questions.forEach((q, i) => { d0 += `${i ? "L" : "M"}${x(q).toFixed(1)},${y(100 * sq.upper[i]).toFixed(1)} `; });
  for (let i = n - 1; i >= 0; i--) {
    d0 += `L${x(sq.questions[i]).toFixed(1)},${y(100 * sq.lower[i]).toFixed(1)} `;
  }
  add("path", { d: d0 + "Z", class: "band-fill" });
  add("path", { d: `M${L},${y(0).toFixed(1)} H${xr}`, class: "zero-line" });
  for (const m of [margin, -margin]) {
    add("path", { d: `M${L},${y(m).toFixed(1)} H${xr}`, class: "margin-line" });
  }
  if (d.decision !== "undecided" && d.decision !== "contradicted" && d.questions) {
    add("path", { d: `M${x(d.questions).toFixed(1)},${T} V${H - B}`, class: "decided-line" });
  }
  add("path", { d: `M${L},${T} V${H - B} H${xr}`, stroke: "#bbb", fill: "none" });
  label(`${signed(top, 0)} pts`, L - 3, T + 8, "end");
  label("0", L - 3, y(0) + 3, "end");
  label(`${signed(-top, 0)} pts`, L - 3, H - B, "end");
  if (margin > 0 && margin < top / 2) {
    label(signed(margin, 1), L - 3, y(margin) + 3, "end", "axis margin-tick");
    label(signed(-margin, 1), L - 3, y(-margin) + 3, "end", "axis margin-tick");
  }
  // The band's two ends now, signed, at the right edge (kept apart when the band is thin).
  const yHi = y(hi), yLo = Math.max(y(lo), yHi + 10);
  label(signed(hi, 1), xr + 3, Math.max(T + 8, yHi + 3), "start", "axis band-end");
  label(signed(lo, 1), xr + 3, Math.min(H - B, yLo + 3), "start", "axis band-end");
  label("0", L, H - 2, "start");
  label(`${fmt(qmax, 0)} questions`, xr, H - 2, "end");
  const box = el("div", null, "band-box");
  box.appendChild(svg);
  const key = el("div", null, "band-key");
  key.appendChild(el("span", "band: the interval", "key-band"));
  key.appendChild(el("span", `±${fmt(margin, 1)} pts: the margin`, "key-margin"));
  if (d.decision !== "undecided" && d.decision !== "contradicted" && d.questions) key.appendChild(el("span", "decided", "key-decided"));
  box.appendChild(key);
  return box;
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
    cell.appendChild(el("div", `about ${d.about || (d.target === "run" ? "this run" : "the models")}`, "hint"));
    if (d.level) cell.appendChild(el("div", d.level, "hint"));
    if (d.reason) cell.appendChild(el("div", d.reason, "hint"));
    const interval = d.estimate === null ? "–"
      : `${signed(100 * d.estimate, 1)} pts${d.estimate_note ? " (" + d.estimate_note + ")" : ""}; ${d.interval || "–"}`;
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
    // as the viewer's own tables draw it (app.debate_url): run and id in the query string
    a.setAttribute("href", "/debate?" + new URLSearchParams({ run: d.run, id: d.qid }).toString());
    const when = d.finished_at ? utcTime(d.finished_at) : "–";
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
    drawChips(data.runs);
    drawServers(data.servers);
    drawDecisions(data.decisions || []);
    drawNewest(data.newest);
    const writing = data.runs.some((x) => x.live);
    state.textContent = (writing ? "running" : "not being written") + ", updated " +
      utcTime(data.now) + " UTC";
  } catch (e) {
    state.textContent = "cannot reach crawdad view (" + e.message + "); retrying";
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.getElementById("live-runs")) poll();
});
