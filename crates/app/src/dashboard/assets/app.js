// The hubhost dashboard: polls the view on screen once a second and redraws it, and shows
// each alarm the moment the handler pushes it (server-sent events). Everything
// shown goes into the page through textContent or SVG attributes, never as markup, so a home
// id or a sensor name containing HTML is shown as text.
"use strict";

const BASE = "/api/dashboard";
const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const COLORS = {
  motion: "#4e79a7", door: "#f28e2b", window: "#76b7b2",
  glass_break: "#e15759", smoke: "#9c755f", co: "#b07aa1",
};

const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (className) e.className = className;
  return e;
}

function time(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : "–";
}

function fill(tableId, rows, cells, rowClass) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = el("tr", undefined, rowClass ? rowClass(row) : undefined);
    for (const [value, numeric] of cells(row)) {
      tr.appendChild(el("td", value ?? "–", numeric ? "num" : undefined));
    }
    return tr;
  }));
}

// A text label on a chart (as text: never markup).
function svgLabel(svg, x, y, text, { anchor, color } = {}) {
  const t = document.createElementNS(SVG, "text");
  t.setAttribute("x", x);
  t.setAttribute("y", y);
  t.setAttribute("font-size", "11");
  if (color) t.setAttribute("fill", color);
  if (anchor) t.setAttribute("text-anchor", anchor);
  t.textContent = text;
  svg.appendChild(t);
}

// A bar per minute over the last hour (`value` of each minute; stacked by `parts` when given),
// on a fixed time axis so that a quiet minute shows as a gap.
const HOUR_MS = 60 * 60000;
function chart(containerId, minutes, value, parts) {
  const width = 900, height = 200, pad = 30;
  const axisEnd = Math.max(Date.now(), ...minutes.map((m) => Date.parse(m.start) + 60000));
  const axisStart = axisEnd - HOUR_MS;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  const totals = minutes.map((m) => value(m));
  const max = Math.max(1, ...totals);
  const slot = (width - 2 * pad) / 60;
  minutes.forEach((m, i) => {
    const x = pad + Math.floor((Date.parse(m.start) - axisStart) / 60000) * slot;
    let y = height - pad;
    const pieces = parts ? parts(m) : [["", totals[i], "#4e79a7"]];
    for (const [name, n, color] of pieces) {
      const h = (n / max) * (height - 2 * pad);
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("x", x + 1);
      rect.setAttribute("y", y - h);
      rect.setAttribute("width", Math.max(1, slot - 2));
      rect.setAttribute("height", h);
      rect.setAttribute("fill", color);
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${time(m.start)} ${name} ${n}`.trim();
      rect.appendChild(title);
      svg.appendChild(rect);
      y -= h;
    }
  });
  svgLabel(svg, 2, pad - 8, `max ${max}`);
  svgLabel(svg, pad, height - 10, time(new Date(axisStart).toISOString()));
  svgLabel(svg, width - pad, height - 10, time(new Date(axisEnd).toISOString()), { anchor: "end" });
  $(containerId).replaceChildren(svg);
}

function showFleet(v) {
  $("fleet-events").textContent = v.eventsLastHour;
  $("fleet-homes").textContent = v.homesReporting;
  $("fleet-alarm-homes").textContent = v.homesWithActiveAlarms;
  chart("fleet-chart", v.minutes, (m) => m.events);
  fill("fleet-alarm-types", Object.entries(v.alarmsByType), ([kind, n]) => [[kind], [n, true]]);
  fill("fleet-active", v.activeAlarms,
    (a) => [[a.home], [a.kind], [a.sensorId], [time(a.ts)]], () => "alarm");
}

function showHome(v) {
  $("home-title").textContent = v.home;
  $("home-partition").textContent = v.partition === null ? "(unknown home)" : `partition ${v.partition}`;
  $("home-empty").hidden = v.minutes.length > 0;
  const kinds = Object.keys(COLORS);
  chart("home-chart", v.minutes, (m) => m.events,
    (m) => kinds.filter((k) => m.counts[k]).map((k) => [k, m.counts[k], COLORS[k]]));
  $("home-legend").replaceChildren(...kinds.map((k) => {
    const s = el("span", k);
    const swatch = el("i");
    swatch.style.background = COLORS[k];
    s.prepend(swatch);
    return s;
  }));
  fill("home-alarms", v.alarms, (a) => [[a.kind], [a.sensorId], [time(a.ts)]], () => "alarm");
  fill("home-sensors", Object.entries(v.sensors),
    ([id, s]) => [[id], [s.type], [s.state], [s.value, true], [time(s.ts)]]);
}

// Two series over time on one chart: unprocessed events (line, left scale) and instances
// (steps, right scale), from points {at, unprocessedEvents, instances}.
const BACKLOG_COLOR = "#4e79a7", INSTANCES_COLOR = "#f28e2b";
function timeline(containerId, points) {
  const width = 900, height = 200, pad = 36;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  const times = points.map((p) => Date.parse(p.at));
  const start = Math.min(...times), end = Math.max(start + 1000, ...times);
  const maxEvents = Math.max(1, ...points.map((p) => p.unprocessedEvents));
  const maxInstances = Math.max(1, ...points.map((p) => p.instances));
  const x = (t) => pad + ((t - start) / (end - start)) * (width - 2 * pad);
  const y = (v, max) => height - pad - (v / max) * (height - 2 * pad);
  const path = (coords, color, name) => {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", coords.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    line.dataset.series = name;
    svg.appendChild(line);
  };
  path(points.map((p, i) => [x(times[i]), y(p.unprocessedEvents, maxEvents)]), BACKLOG_COLOR, "unprocessed");
  const steps = [];
  points.forEach((p, i) => {
    if (i > 0) steps.push([x(times[i]), y(points[i - 1].instances, maxInstances)]);
    steps.push([x(times[i]), y(p.instances, maxInstances)]);
  });
  path(steps, INSTANCES_COLOR, "instances");
  svgLabel(svg, 2, pad - 10, `unprocessed events (max ${maxEvents})`, { color: BACKLOG_COLOR });
  svgLabel(svg, width - 2, pad - 10, `instances (max ${maxInstances})`, { color: INSTANCES_COLOR, anchor: "end" });
  svgLabel(svg, pad, height - 10, time(new Date(start).toISOString()), { color: "#555" });
  svgLabel(svg, width - pad, height - 10, time(new Date(end).toISOString()), { color: "#555", anchor: "end" });
  $(containerId).replaceChildren(svg);
}

function showOperations(v) {
  // The scale controller's record covers the time the page was closed; else this page's polls.
  const fromScale = v.scale.length > 0;
  const points = fromScale
    ? v.scale.map((p) => ({ at: p.at, unprocessedEvents: p.unprocessedEvents, instances: p.instances }))
    : v.history;
  timeline("ops-chart", points);
  $("ops-chart-source").textContent = fromScale
    ? "(the scale controller's decisions)"
    : "(owning instances, while this page is open)";
  const last = v.scale[v.scale.length - 1];
  $("ops-scale").hidden = !last;
  if (last) {
    $("ops-scale").textContent =
      `scale controller, ${time(last.at)}: ${last.unprocessedEvents} unprocessed on ${last.partitions} partitions, target ${last.target} (${last.reason}), ${last.instances} instances`;
  }
  $("ops-instance-count").textContent = v.instances.length;
  $("ops-lag").textContent = v.totalLag;
  $("ops-group").textContent = `consumer group ${v.consumerGroup}`;
  $("ops-retrying-section").hidden = v.retrying.length === 0;
  fill("ops-retrying", v.retrying, (r) => [
    [r.function], [r.partition, true], [r.failedAttempts, true], [time(r.since)], [r.lastError],
  ]);
  fill("ops-instances", v.instances, (i) => [[i.owner], [i.partitions.join(", ")]]);
  fill("ops-partitions", v.partitions, (p) => [
    [p.partition, true], [p.owner ?? "(none)"], [p.checkpoint, true],
    [p.lastEnqueued, true], [p.lag, true], [p.eventsPerSecond, true],
  ]);
}

// Several series over time on one chart (one scale), from {name, color, points: [{t, v}]}.
const SERIES_COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
function lines(containerId, series, unit) {
  const width = 900, height = 180, pad = 36;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  const all = series.flatMap((s) => s.points);
  const start = Math.min(...all.map((p) => p.t)), end = Math.max(start + 1000, ...all.map((p) => p.t));
  const max = Math.max(1, ...all.map((p) => p.v));
  const x = (t) => pad + ((t - start) / (end - start)) * (width - 2 * pad);
  const y = (v) => height - pad - (v / max) * (height - 2 * pad);
  for (const s of series) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", s.points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", s.color);
    line.setAttribute("stroke-width", "2");
    line.dataset.series = s.name;
    const title = document.createElementNS(SVG, "title");
    title.textContent = s.name;
    line.appendChild(title);
    svg.appendChild(line);
  }
  svgLabel(svg, 2, pad - 10, `${unit} (max ${Math.round(max)})`);
  if (all.length) {
    svgLabel(svg, pad, height - 10, time(new Date(start).toISOString()));
    svgLabel(svg, width - pad, height - 10, time(new Date(end).toISOString()), { anchor: "end" });
  }
  $(containerId).replaceChildren(svg);
}

// The explorer: what the page remembers between polls (for rates and charts), and the peek.
const HISTORY_MS = 5 * 60000;
const ex = { hub: null, group: null, last: new Map(), rates: new Map(), lags: new Map(), view: null, next: null };

function remember(map, key, point) {
  const points = map.get(key) || [];
  points.push(point);
  while (points.length && point.t - points[0].t > HISTORY_MS) points.shift();
  map.set(key, points);
}

function options(selectId, values, selected) {
  const select = $(selectId);
  const wanted = values.includes(selected) ? selected : values[0];
  if ([...select.options].map((o) => o.value).join("\n") !== values.join("\n")) {
    select.replaceChildren(...values.map((v) => { const o = el("option", v); o.value = v; return o; }));
  }
  select.value = wanted ?? "";
  return wanted;
}

function showExplorer(v) {
  ex.view = v;
  $("ex-source").textContent = `from ${v.source}`;
  const now = Date.now();
  for (const hub of v.hubs) {
    for (const p of hub.partitions) {
      const key = `${hub.name}/${p.id}`;
      const before = ex.last.get(key);
      if (before && now > before.t) {
        remember(ex.rates, key, { t: now, v: Math.max(0, (p.lastSequenceNumber - before.last) * 1000 / (now - before.t)) });
      }
      ex.last.set(key, { t: now, last: p.lastSequenceNumber });
    }
    for (const g of hub.consumerGroups) {
      if (g.checkpointed) remember(ex.lags, `${hub.name}/${g.name}`, { t: now, v: g.lag });
    }
  }
  // Until the user picks one, the hub the functions are triggered by, not the first by name.
  ex.hub = options("ex-hub", v.hubs.map((h) => h.name), ex.hub ?? v.opensOn);
  const hub = v.hubs.find((h) => h.name === ex.hub);
  if (!hub) return;
  $("ex-hub-title").textContent = `${hub.name}: ${hub.partitions.length} partitions`;
  const rate = (p) => {
    const points = ex.rates.get(`${hub.name}/${p.id}`);
    return points && points.length ? points[points.length - 1].v.toFixed(1) : "–";
  };
  fill("ex-partitions", hub.partitions, (p) => [
    [p.id, true], [p.beginningSequenceNumber, true], [p.lastSequenceNumber, true],
    [time(p.lastEnqueuedTime)], [p.retainedBytes ?? "–", true], [rate(p), true],
  ]);
  lines("ex-rate-chart", hub.partitions.map((p, i) => ({
    name: `partition ${p.id}`, color: SERIES_COLORS[i % SERIES_COLORS.length],
    points: ex.rates.get(`${hub.name}/${p.id}`) || [],
  })), "events/s");
  fill("ex-groups", hub.consumerGroups, (g) => [
    [g.name], [g.checkpointed ? "yes" : "no"],
    [g.checkpointed ? [...new Set(g.partitions.map((p) => p.owner).filter((o) => o))].join(", ") || "(none)" : "–"],
    [g.checkpointed ? g.lag : "–", true],
  ]);
  const kafka = hub.kafkaGroups || [];
  $("ex-kafka").hidden = kafka.length === 0;
  fill("ex-kafka-groups", kafka, (g) => [
    [g.name], [g.state ?? "(not seen since the hub started)"], [g.members.length, true],
    [g.partitions.length, true], [g.lag, true],
  ]);
  const checkpointed = hub.consumerGroups.filter((g) => g.checkpointed);
  lines("ex-lag-chart", checkpointed.map((g, i) => ({
    name: g.name, color: SERIES_COLORS[i % SERIES_COLORS.length], points: ex.lags.get(`${hub.name}/${g.name}`) || [],
  })), "unprocessed events");
  ex.group = options("ex-group", checkpointed.map((g) => g.name), ex.group);
  const group = checkpointed.find((g) => g.name === ex.group);
  fill("ex-progress", group ? group.partitions : [], (p) => [
    [p.id, true], [p.owner ?? "(none)"], [p.checkpoint ?? "–", true], [p.lag, true],
  ]);
  options("ex-peek-partition", hub.partitions.map((p) => p.id), $("ex-peek-partition").value);
  $("ex-peek").disabled = !v.canPeek;
  if (!v.canPeek) $("ex-peek-status").textContent = "peeking needs a hubhost hub's admin endpoint; a real event hub is shown read-only";
  $("ex-send").disabled = !v.canSend;
  $("ex-send-disabled").hidden = v.canSend;
  $("ex-send-disabled").textContent = "sending is disabled here: the page is not served on loopback only (start the handler with --allow-send to allow it)";
}

function showEvents(events) {
  $("ex-events").replaceChildren(...events.map((e) => {
    const box = el("div", undefined, "event");
    box.dataset.sequenceNumber = String(e.sequenceNumber);
    const meta = [`#${e.sequenceNumber}`, `offset ${e.offset}`, time(e.enqueuedTime)];
    if (e.partitionKey !== null) meta.push(`key ${e.partitionKey}`);
    meta.push(`${e.body.kind}, ${e.body.bytes} bytes${e.body.truncated ? " (the start shown)" : ""}`);
    box.appendChild(el("div", meta.join(" · "), "meta"));
    box.appendChild(el("pre", e.body.shown, `body body-${e.body.kind}`));
    for (const [title, props, kind] of [["properties", e.properties, "app"], ["system properties", e.systemProperties, "system"]]) {
      const entries = Object.entries(props);
      if (!entries.length) continue;
      const table = el("table", undefined, `props props-${kind}`);
      table.appendChild(el("caption", title));
      for (const [name, value] of entries) {
        const tr = el("tr");
        tr.appendChild(el("td", name));
        tr.appendChild(el("td", typeof value === "string" ? value : JSON.stringify(value)));
        table.appendChild(tr);
      }
      box.appendChild(table);
    }
    return box;
  }));
}

async function peek(from) {
  const partition = $("ex-peek-partition").value;
  const count = $("ex-peek-count").value || "10";
  const url = `${BASE}/explorer/events.json?hub=${encodeURIComponent(ex.hub)}&partition=${encodeURIComponent(partition)}&from=${encodeURIComponent(from)}&count=${encodeURIComponent(count)}`;
  $("ex-peek-status").textContent = "reading…";
  try {
    const response = await fetch(url, { cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
    showEvents(body);
    ex.next = body.length ? String(body[body.length - 1].sequenceNumber + 1) : null;
    $("ex-peek-next").disabled = ex.next === null;
    $("ex-peek-status").textContent = `${body.length} events of ${ex.hub}, partition ${partition}`;
  } catch (e) {
    $("ex-peek-status").textContent = `cannot peek: ${e.message}`;
  }
}

$("ex-peek-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const kind = $("ex-peek-from").value;
  peek(kind === "sequence" || kind === "time" ? $("ex-peek-at").value.trim() : kind);
});
$("ex-peek-next").addEventListener("click", () => { if (ex.next !== null) peek(ex.next); });
$("ex-hub").addEventListener("change", () => { ex.hub = $("ex-hub").value; if (ex.view) showExplorer(ex.view); });
$("ex-group").addEventListener("change", () => { ex.group = $("ex-group").value; if (ex.view) showExplorer(ex.view); });

$("ex-send-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const properties = {};
  for (const line of $("ex-send-properties").value.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0) properties[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  const request = {
    hub: ex.hub, body: $("ex-send-body").value, properties,
    partitionKey: $("ex-send-key").value.trim() || null, partitionId: $("ex-send-partition").value.trim() || null,
  };
  $("ex-send-status").textContent = "sending…";
  try {
    const response = await fetch(`${BASE}/explorer/send`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
    $("ex-send-status").textContent = `sent ${body.bytes} bytes to ${body.hub}`;
    $("ex-send-status").className = "sub";
  } catch (err) {
    $("ex-send-status").textContent = `not sent: ${err.message}`;
    $("ex-send-status").className = "sub error";
  }
});

// The view on screen, from the location's hash: #fleet, #operations, #explorer, #home or #home=ID.
function current() {
  const hash = decodeURIComponent(location.hash.slice(1));
  if (hash.startsWith("home")) return { view: "home", id: hash.startsWith("home=") ? hash.slice(5) : "" };
  if (hash === "operations") return { view: "operations" };
  if (hash === "explorer") return { view: "explorer" };
  if (hash.startsWith("traces")) return { view: "traces", id: hash.startsWith("traces=") ? hash.slice(7) : "" };
  return { view: "fleet" };
}

// An alarm's trace as a waterfall: one row per hop (the reading's send, the host's delivery,
// the request to the handler, the function, the alarm's send and enqueue) and a last row for
// this page showing it, each a bar placed by its start and length on one time scale.
//
// When this page first showed each alarm: its "enqueue → page" is fixed then. Two alarms of
// one batch share a trace, so an alarm is known by its trace and its home.
const firstShown = new Map();
const alarmKey = (a) => `${a.traceId} ${a.home}`;

function showTraces(alarms) {
  $("traces-empty").hidden = alarms.length > 0;
  const now = Date.now();
  for (const a of alarms) if (!firstShown.has(alarmKey(a))) firstShown.set(alarmKey(a), now);
  for (const k of [...firstShown.keys()]) if (!alarms.some((a) => alarmKey(a) === k)) firstShown.delete(k);
  const chosenKey = current().id || (alarms[0] ? alarmKey(alarms[0]) : "");
  fill("traces-alarms", alarms, (a) => {
    const shownMs = firstShown.get(alarmKey(a)) - a.originUnixMs;
    const enqueued = a.hops.find((h) => h.label === "alarm enqueued");
    const toPage = enqueued ? `${Math.round(shownMs - enqueued.startMs)} ms` : "–";
    return [[a.home], [a.kind], [toPage, true], [a.traceId.slice(0, 12)]];
  }, (a) => (alarmKey(a) === chosenKey ? "alarm chosen" : "alarm"));
  const rows = $("traces-alarms").querySelectorAll("tbody tr");
  alarms.forEach((a, i) => {
    rows[i].onclick = () => { location.hash = `traces=${encodeURIComponent(alarmKey(a))}`; };
  });
  const alarm = alarms.find((a) => alarmKey(a) === chosenKey);
  const box = $("trace-waterfall");
  if (!alarm) {
    $("trace-title").textContent = "";
    box.replaceChildren();
    return;
  }
  $("trace-title").textContent = `(${alarm.kind} in ${alarm.home}, trace ${alarm.traceId})`;
  const shown = { label: "shown on this page", service: "browser", startMs: firstShown.get(alarmKey(alarm)) - alarm.originUnixMs, durationMs: 0 };
  const hops = [...alarm.hops, shown];
  const end = Math.max(1, ...hops.map((h) => h.startMs + h.durationMs));
  box.replaceChildren(...hops.map((h, i) => {
    const row = el("div", undefined, i === hops.length - 1 ? "hop page" : "hop");
    row.appendChild(el("span", `${h.label} · ${h.service}`));
    const lane = el("div", undefined, "lane");
    const bar = el("div", undefined, "bar");
    bar.style.left = `${(100 * h.startMs) / end}%`;
    bar.style.width = `${(100 * h.durationMs) / end}%`;
    lane.appendChild(bar);
    row.appendChild(lane);
    row.appendChild(el("span", `+${Math.round(h.startMs)} ms`, "num"));
    return row;
  }));
}

async function refresh() {
  const { view, id } = current();
  for (const name of ["fleet", "home", "operations", "explorer", "traces"]) {
    $(`view-${name}`).hidden = name !== view;
    $(`tab-${name}`).className = name === view ? "active" : "";
  }
  if (view === "home" && document.activeElement !== $("home-id")) $("home-id").value = id;
  if (view === "home" && !id) {
    $("status").textContent = "enter a home id";
    return;
  }
  const url = view === "home" ? `${BASE}/home.json?id=${encodeURIComponent(id)}` : `${BASE}/${view}.json`;
  try {
    const response = await fetch(url, { cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
    if (current().view !== view) return;
    ({ fleet: showFleet, home: showHome, operations: showOperations, explorer: showExplorer, traces: showTraces })[view](body);
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.updated = String(Date.now());
  } catch (e) {
    $("status").textContent = `cannot update: ${e.message}`;
  }
}

// Alarms as they are raised: the handler pushes each one from the alarms event hub. The views
// are polled all the same, so where the stream cannot stay open (an old browser, a proxy that
// holds a response back) every alarm still shows at the next poll, in the tables below.
const LIVE_ROWS = 20;
const STREAM_SILENT_MS = 10000;
const liveAlarms = [];
function liveStatus(text) {
  $("live-status").textContent = `(${text})`;
}
function showLive() {
  fill("fleet-live", liveAlarms, (a) => [
    [a.home], [a.kind], [a.sensorId], [time(a.ts)],
    [a.enqueued ? Math.max(0, a.shownAt - Date.parse(a.enqueued)) : null, true],
  ], () => "alarm");
}
function openAlarmStream() {
  if (typeof EventSource !== "function") {
    liveStatus("this browser cannot keep a stream open: alarms show with each update");
    return;
  }
  const stream = new EventSource(`${BASE}/alarms`);
  // The handler says "connected" at once; a stream silent for longer is held back on its way
  // (the Functions host forwarding a response buffers it whole).
  let heard = false;
  setTimeout(() => {
    if (heard) return;
    stream.close();
    liveStatus("held back on its way here: alarms show with each update");
  }, STREAM_SILENT_MS);
  for (const kind of ["connected", "live", "alarm", "unavailable", "missed"]) {
    stream.addEventListener(kind, () => { heard = true; });
  }
  stream.addEventListener("connected", () => liveStatus("connecting to the alarms hub"));
  stream.addEventListener("live", () => liveStatus("live"));
  stream.addEventListener("alarm", (e) => {
    const alarm = JSON.parse(e.data);
    alarm.shownAt = Date.now();
    liveAlarms.unshift(alarm);
    liveAlarms.length = Math.min(liveAlarms.length, LIVE_ROWS);
    showLive();
    document.body.dataset.pushed = String(Number(document.body.dataset.pushed || 0) + 1);
  });
  stream.addEventListener("unavailable", (e) => liveStatus(`paused: ${JSON.parse(e.data).message}`));
  stream.addEventListener("missed", (e) => liveStatus(`live; ${JSON.parse(e.data).missed} alarms came too fast to show`));
  stream.onerror = () => liveStatus(stream.readyState === EventSource.CLOSED
    ? "not available: alarms show with each update"
    : "reconnecting");
}

$("home-form").addEventListener("submit", (e) => {
  e.preventDefault();
  location.hash = `home=${encodeURIComponent($("home-id").value.trim())}`;
});
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, POLL_MS);
openAlarmStream();
