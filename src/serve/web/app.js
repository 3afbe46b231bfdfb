// The weir status page: reads the status document (the one `weir status
// --json` prints) every second and draws it. Plain JavaScript, no
// dependencies, embedded in the binary: nothing to build or fetch.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const BOX = { w: 236, h: 92, gx: 70, gy: 22 };
// The operator whose subtasks are shown: in the address (`#NAME`), so a link can open it.
let selected = decodeURIComponent(location.hash.slice(1)) || null;
let renders = 0;

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function count(n) {
  if (n === null || n === undefined) return "—";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + " G";
  if (a >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + " K";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function pct(share) { return Math.round(share * 100) + " %"; }

function time(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  return isNaN(d) ? String(ms) : d.toISOString().replace("T", " ").replace("Z", "");
}

function duration(secs) {
  if (secs === null || secs === undefined) return "—";
  const s = Math.round(secs);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return (h ? h + " h " : "") + (h || m ? m + " min " : "") + (s % 60) + " s";
}

// The busiest subtask's share: one stalled subtask of many shows (as in Flink).
function busiest(op) {
  return Math.max(op.busy, ...(op.subtasks || []).map((s) => s.busy));
}

// Flink's colors: idle blue, busy red, backpressured dark grey.
function load(op) {
  if (op.backpressured >= 0.5) return { state: "backpressured", fill: "#4b5563", text: "#fff" };
  const b = Math.max(0, Math.min(1, busiest(op)));
  const mix = (x, y) => Math.round(x + (y - x) * b);
  const fill = `rgb(${mix(219, 248)},${mix(234, 113)},${mix(254, 113)})`;
  return { state: b >= 0.5 ? "busy" : "idle", fill, text: "#111" };
}

// Layers by longest path from the sources; within a layer, ordered by the
// mean position of each node's inputs (fewer crossings).
function layout(ops) {
  const byName = new Map(ops.map((o) => [o.name, o]));
  const layer = new Map();
  const depth = (o, seen) => {
    if (layer.has(o.name)) return layer.get(o.name);
    if (seen.has(o.name)) return 0;
    seen.add(o.name);
    const ins = (o.inputs || []).map((n) => byName.get(n)).filter(Boolean);
    const d = ins.length ? 1 + Math.max(...ins.map((i) => depth(i, seen))) : 0;
    layer.set(o.name, d);
    return d;
  };
  ops.forEach((o) => depth(o, new Set()));
  const layers = [];
  ops.forEach((o) => (layers[layer.get(o.name)] ||= []).push(o));
  const row = new Map();
  layers.forEach((members) => {
    const key = (o) => {
      const ys = (o.inputs || []).filter((n) => row.has(n)).map((n) => row.get(n));
      return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : 0;
    };
    members.sort((a, b) => key(a) - key(b));
    members.forEach((o, i) => row.set(o.name, i));
  });
  const pos = new Map();
  const tallest = Math.max(...layers.map((m) => m.length));
  layers.forEach((members, x) => {
    const offset = ((tallest - members.length) * (BOX.h + BOX.gy)) / 2;
    members.forEach((o, y) => pos.set(o.name, { x: 10 + x * (BOX.w + BOX.gx), y: 10 + offset + y * (BOX.h + BOX.gy) }));
  });
  return { pos, width: 20 + layers.length * (BOX.w + BOX.gx) - BOX.gx, height: 20 + tallest * (BOX.h + BOX.gy) - BOX.gy };
}

function drawGraph(ops) {
  const { pos, width, height } = layout(ops);
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, id: "job-graph" });
  const defs = el("svg:defs");
  const marker = el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
  marker.appendChild(el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a93a3" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  for (const o of ops) {
    for (const input of o.inputs || []) {
      const a = pos.get(input), b = pos.get(o.name);
      if (!a || !b) continue;
      const x1 = a.x + BOX.w, y1 = a.y + BOX.h / 2, x2 = b.x, y2 = b.y + BOX.h / 2, mid = (x1 + x2) / 2;
      svg.appendChild(el("svg:path", { class: "edge", "data-from": input, "data-to": o.name, d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
    }
  }
  for (const o of ops) {
    const p = pos.get(o.name), c = load(o);
    const g = el("svg:g", { class: "node" + (o.name === selected ? " selected" : ""), "data-name": o.name, "data-state": c.state, transform: `translate(${p.x},${p.y})` });
    g.appendChild(el("svg:rect", { width: BOX.w, height: BOX.h, fill: c.fill }));
    const lines = [
      [`${o.name}  ×${o.parallelism}`, "title"],
      [o.kind, ""],
      [`in ${count(o.in_per_sec)}/s · out ${count(o.out_per_sec)}/s`, ""],
      [`busy ${pct(busiest(o))} · backpressure ${pct(o.backpressured)}`, ""],
      [`wm ${shortTime(o.input_watermark)} → ${shortTime(o.output_watermark)}`, ""],
    ];
    lines.forEach(([t, cls], i) => g.appendChild(el("svg:text", { x: 8, y: 17 + i * 17, fill: c.text, class: cls }, t)));
    const title = el("svg:title", {}, `${o.name}: ${o.records_in} in, ${o.records_out} out, ${o.records_dropped || 0} dropped (${o.dead_lettered || 0} to a dead letter)`);
    g.appendChild(title);
    g.addEventListener("click", () => {
      selected = selected === o.name ? null : o.name;
      history.replaceState(null, "", selected ? "#" + encodeURIComponent(selected) : location.pathname);
      refresh(false);
    });
    svg.appendChild(g);
  }
  const canvas = document.getElementById("graph-canvas");
  canvas.replaceChildren(svg);
}

function shortTime(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  return isNaN(d) ? String(ms) : d.toISOString().slice(11, 23);
}

function table(head, rows, attrs) {
  const t = el("table", attrs || {});
  const tr = el("tr");
  head.forEach(([h, cls]) => tr.appendChild(el("th", cls ? { class: cls } : {}, h)));
  t.appendChild(el("thead")).appendChild(tr);
  const body = t.appendChild(el("tbody"));
  rows.forEach((r) => {
    const row = el("tr", r.attrs || {});
    r.cells.forEach(([v, cls]) => row.appendChild(el("td", cls ? { class: cls } : {}, v)));
    body.appendChild(row);
  });
  return t;
}

function drawSubtasks(ops) {
  const box = document.getElementById("subtasks");
  const o = ops.find((x) => x.name === selected);
  if (!o) { box.replaceChildren(); return; }
  const head = [["subtask"], ["records in", "num"], ["in/s", "num"], ["records out", "num"], ["out/s", "num"], ["busy", "num"], ["backpressure", "num"], ["input watermark"], ["output watermark"]];
  const rows = (o.subtasks || []).map((s, i) => ({
    attrs: { class: "subtask", "data-subtask": i },
    cells: [[String(i)], [count(s.records_in), "num"], [count(s.in_per_sec), "num"], [count(s.records_out), "num"], [count(s.out_per_sec), "num"], [pct(s.busy), "num"], [pct(s.backpressured), "num"], [time(s.input_watermark)], [time(s.output_watermark)]],
  }));
  box.replaceChildren(el("h2", {}, `${o.name}: subtasks`), table(head, rows, { id: "subtask-table", "data-operator": o.name }));
}

function drawCheckpoints(c, doc) {
  const counts = document.getElementById("checkpoint-counts");
  const body = document.getElementById("checkpoint-history");
  if (!c) { counts.textContent = "Checkpointing is off for this pipeline."; body.replaceChildren(); return; }
  const failed = Object.entries(c.failed_by || {}).filter(([, n]) => n > 0).map(([r, n]) => `${r} ${n}`).join(", ");
  const parts = [
    `completed ${c.completed}`,
    `failed ${c.failed}` + (failed ? ` (${failed})` : ""),
    `in progress: ${c.in_progress ?? "none"}`,
    `savepoints ${c.savepoints_completed || 0} completed, ${c.savepoints_failed || 0} failed`,
    c.restored_from ? `restored from ${c.restored_from}` : "not restored",
  ];
  counts.replaceChildren(el("p", { id: "checkpoint-summary" }, parts.join(" · ")));
  body.replaceChildren(...(c.history || []).map((h) => {
    const tr = el("tr", { class: "checkpoint " + h.status, "data-id": h.id, "data-status": h.status, "data-kind": h.kind });
    const ok = h.status === "completed";
    const cells = [
      [String(h.id), "num"], [h.kind], [h.status], [time(h.ended_ms)],
      [ok ? h.duration_ms + " ms" : "", "num"], [ok ? h.sync_ms + " ms" : "", "num"], [ok ? h.async_ms + " ms" : "", "num"], [ok ? h.alignment_ms + " ms" : "", "num"],
      [ok ? bytes(h.bytes) : "", "num"], [ok ? bytes(h.reused_bytes) : "", "num"], [ok ? bytes(h.in_flight_bytes) : "", "num"],
      [h.reason ? `${h.reason_class}: ${h.reason}` : ""],
    ];
    cells.forEach(([v, cls]) => tr.appendChild(el("td", cls ? { class: cls } : {}, v)));
    return tr;
  }));
  document.getElementById("savepoint-info").textContent =
    doc.savepoint_in_progress ? "A savepoint is in progress." : `${c.savepoints_completed || 0} savepoint(s) taken by this run.`;
}

function drawSources(live) {
  const list = document.getElementById("source-list");
  const parts = [];
  const sources = live.operators.filter((o) => o.kind === "source");
  parts.push(table([["source"], ["×"], ["records", "num"], ["records/s", "num"], ["dropped", "num"], ["output watermark"]],
    sources.map((o) => ({ attrs: { class: "source", "data-name": o.name }, cells: [[o.name], [String(o.parallelism)], [count(o.records_out), "num"], [count(o.out_per_sec), "num"], [count(o.records_dropped || 0), "num"], [time(o.output_watermark)]] }))));
  if (live.progress) {
    const p = live.progress, share = p.total ? p.done / p.total : 0;
    parts.push(el("p", { id: "input-progress" }, `Bounded input: ${pct(share)} of ${p.unit === "bytes" ? bytes(p.total) : count(p.total) + " rows"}, ETA ${duration(p.eta_secs)}`));
  }
  for (const lag of live.kafka_lag || []) {
    const worst = lag.worst ? `, worst ${lag.worst.topic}[${lag.worst.partition}] ${count(lag.worst.records)}` : "";
    parts.push(el("p", { class: "kafka-lag" }, `${lag.operator}: lag ${count(lag.records)} records${worst}`));
  }
  list.replaceChildren(...parts);
}

function drawWarnings(lines) {
  const list = document.getElementById("warning-list");
  if (!lines || !lines.length) { list.replaceChildren(el("p", { class: "muted" }, "None.")); return; }
  list.replaceChildren(...lines.slice().reverse().map((l) => el("div", { class: "warn " + l.level.toLowerCase() }, `${time(l.at_ms)} ${l.level} ${l.text}`)));
}

function draw(doc) {
  const live = doc.live;
  document.getElementById("pipeline").textContent = doc.pipeline;
  document.title = `weir · ${doc.pipeline}`;
  document.getElementById("state").textContent = live ? live.state : doc.stopping ? "stopping" : "starting";
  document.getElementById("error").textContent = "";
  if (!live) return;
  document.getElementById("uptime").textContent = duration(live.uptime_secs);
  document.getElementById("rate").textContent = count(live.records_per_sec);
  document.getElementById("watermark").textContent = time(live.watermark);
  document.getElementById("progress").textContent = live.progress ? `${pct(live.progress.done / Math.max(1, live.progress.total))} done, ETA ${duration(live.progress.eta_secs)}` : "";
  drawGraph(live.operators);
  drawSubtasks(live.operators);
  drawCheckpoints(live.checkpoints, doc);
  drawSources(live);
  drawWarnings(live.warnings);
}

let last = null;
// `fetchNew` false: draw the last document again (after a click).
async function refresh(fetchNew) {
  try {
    if (fetchNew || !last) {
      const r = await fetch("api/v1/status", { cache: "no-store" });
      const doc = await r.json();
      if (!r.ok || doc.ok === false) throw new Error(doc.error || `HTTP ${r.status}`);
      last = doc;
    }
    draw(last);
    document.body.dataset.renders = String(++renders);
  } catch (e) {
    document.getElementById("error").textContent = `status unavailable: ${e.message}`;
  }
}

refresh(true);
setInterval(() => refresh(true), 1000);
