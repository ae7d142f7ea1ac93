// The hubhost dashboard: polls the view on screen once a second and redraws it. Everything
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
  const label = (x, y, text, anchor) => {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", x);
    t.setAttribute("y", y);
    t.setAttribute("font-size", "11");
    if (anchor) t.setAttribute("text-anchor", anchor);
    t.textContent = text;
    svg.appendChild(t);
  };
  label(2, pad - 8, `max ${max}`);
  label(pad, height - 10, time(new Date(axisStart).toISOString()));
  label(width - pad, height - 10, time(new Date(axisEnd).toISOString()), "end");
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
  const label = (lx, ly, text, color, anchor) => {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", lx);
    t.setAttribute("y", ly);
    t.setAttribute("font-size", "11");
    t.setAttribute("fill", color);
    if (anchor) t.setAttribute("text-anchor", anchor);
    t.textContent = text;
    svg.appendChild(t);
  };
  label(2, pad - 10, `unprocessed events (max ${maxEvents})`, BACKLOG_COLOR);
  label(width - 2, pad - 10, `instances (max ${maxInstances})`, INSTANCES_COLOR, "end");
  label(pad, height - 10, time(new Date(start).toISOString()), "#555");
  label(width - pad, height - 10, time(new Date(end).toISOString()), "#555", "end");
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
  fill("ops-instances", v.instances, (i) => [[i.owner], [i.partitions.join(", ")]]);
  fill("ops-partitions", v.partitions, (p) => [
    [p.partition, true], [p.owner ?? "(none)"], [p.checkpoint, true],
    [p.lastEnqueued, true], [p.lag, true], [p.eventsPerSecond, true],
  ]);
}

// The view on screen, from the location's hash: #fleet, #operations, #home or #home=ID.
function current() {
  const hash = decodeURIComponent(location.hash.slice(1));
  if (hash.startsWith("home")) return { view: "home", id: hash.startsWith("home=") ? hash.slice(5) : "" };
  if (hash === "operations") return { view: "operations" };
  return { view: "fleet" };
}

async function refresh() {
  const { view, id } = current();
  for (const name of ["fleet", "home", "operations"]) {
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
    ({ fleet: showFleet, home: showHome, operations: showOperations })[view](body);
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.updated = String(Date.now());
  } catch (e) {
    $("status").textContent = `cannot update: ${e.message}`;
  }
}

$("home-form").addEventListener("submit", (e) => {
  e.preventDefault();
  location.hash = `home=${encodeURIComponent($("home-id").value.trim())}`;
});
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, POLL_MS);
