// The dashboard in headless Chromium (Debian's `chromium`, driven by playwright-core), run by
// tests/dashboard.rs against a live `hubhost demo`:
//   node dashboard.cjs <page URL> <home> <home id made of HTML> <latency home> <sent at, ms> <screenshot dir> <traced home>
// Fails (exit 1) on any console error, page error or dialog, when a view does not show what the
// test sent, or when the HTML home id is rendered as markup. Prints its timings as JSON.
"use strict";

const { chromium } = require("playwright-core");
const path = require("path");

const [url, home, htmlHome, latencyHome, sentAt, shots, tracedHome] = process.argv.slice(2);
const TITLE = "hubhost — home security";
const problems = [];

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function show(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.HUBHOST_CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`page error: ${e}`));
    page.on("dialog", (d) => { problems.push(`dialog: ${d.message()}`); d.dismiss(); });

    // First: the home the Rust side sent just before starting us — send → page.
    const started = Date.now();
    await page.goto(`${url}/#home=${encodeURIComponent(latencyHome)}`);
    await page.waitForSelector("body[data-updated]");
    const firstRenderMs = Date.now() - started;
    await page.waitForFunction(() => document.querySelectorAll("#home-chart rect").length > 0,
      null, { timeout: 30000 });
    const sendToPageMs = Date.now() - Number(sentAt);

    // Fleet: the chart, and both test homes among the active alarms, as text.
    await show(page, "fleet");
    await page.waitForFunction(([a, b]) => {
      const homes = [...document.querySelectorAll("#fleet-active tbody td:first-child")].map((t) => t.textContent);
      return document.querySelectorAll("#fleet-chart rect").length > 0 && homes.includes(a) && homes.includes(b);
    }, [home, htmlHome], { timeout: 30000 });
    const events = Number(await page.textContent("#fleet-events"));
    check(events >= 6, `fleet shows ${events} events in the last hour`);

    // Pushed: once the stream is live, a smoke alarm sent through the page's own explorer shows
    // in "Alarms as they are raised", which only the stream fills.
    await page.waitForFunction(() => document.getElementById("live-status").textContent === "(live)",
      null, { timeout: 30000 });
    const pushedHome = `${home}-pushed`;
    const pushSent = Date.now();
    const sent = await page.evaluate(async (h) => {
      const reading = { homeId: h, sensorId: "kitchen-smoke", type: "smoke", state: "alarm", ts: new Date().toISOString() };
      const response = await fetch("/api/dashboard/explorer/send", {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ hub: "sensors", body: JSON.stringify(reading), properties: {}, partitionKey: h, partitionId: null }),
      });
      return response.status;
    }, pushedHome);
    check(sent === 200, `the explorer's send answered ${sent}`);
    await page.waitForFunction((h) => [...document.querySelectorAll("#fleet-live tbody td:first-child")]
      .some((t) => t.textContent === h), pushedHome, { timeout: 30000 });
    const sendToPushedMs = Date.now() - pushSent;
    const pushedRow = await page.$$eval("#fleet-live tbody tr", (rows, h) =>
      rows.map((r) => [...r.children].map((c) => c.textContent)).find((r) => r[0] === h), pushedHome);
    check(pushedRow[1] === "smoke" && pushedRow[2] === "kitchen-smoke", `pushed row: ${JSON.stringify(pushedRow)}`);
    check(Number(pushedRow[4]) >= 0, `pushed row's latency: ${JSON.stringify(pushedRow)}`);
    check(Number(await page.evaluate(() => document.body.dataset.pushed)) >= 1, "no alarm counted as pushed");
    await page.screenshot({ path: path.join(shots, "fleet.png"), fullPage: true });

    // A browser without EventSource: the page says so and shows the alarms with each poll.
    const polling = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    polling.on("pageerror", (e) => problems.push(`page error (no EventSource): ${e}`));
    polling.on("console", (m) => { if (m.type() === "error") problems.push(`console (no EventSource): ${m.text()}`); });
    await polling.addInitScript(() => { delete window.EventSource; });
    await polling.goto(`${url}/#fleet`);
    await polling.waitForFunction((h) => [...document.querySelectorAll("#fleet-active tbody td:first-child")]
      .some((t) => t.textContent === h), pushedHome, { timeout: 30000 });
    const pollingStatus = await polling.textContent("#live-status");
    check(pollingStatus.includes("alarms show with each update"), `live status without EventSource: ${pollingStatus}`);
    check(await polling.$$eval("#fleet-live tbody tr", (rows) => rows.length) === 0, "rows pushed without EventSource");
    await polling.close();

    // Home: chart bars, the glass-break alarm, the sensors' latest states.
    await show(page, `home=${encodeURIComponent(home)}`);
    await page.waitForFunction((h) => document.getElementById("home-title").textContent === h
      && document.querySelectorAll("#home-chart rect").length > 0, home, { timeout: 30000 });
    const alarms = await page.$$eval("#home-alarms tbody td:first-child", (tds) => tds.map((t) => t.textContent));
    check(alarms.includes("glass_break"), `home alarms: ${JSON.stringify(alarms)}`);
    const sensors = await page.$$eval("#home-sensors tbody tr", (trs) => trs.map((tr) => tr.textContent));
    check(sensors.some((s) => s.includes("front-door") && s.includes("open")), `home sensors: ${JSON.stringify(sensors)}`);
    await page.screenshot({ path: path.join(shots, "home.png"), fullPage: true });

    // A home id made of HTML is shown as text and never becomes an element.
    await show(page, `home=${encodeURIComponent(htmlHome)}`);
    await page.waitForFunction((h) => document.getElementById("home-title").textContent === h
      && document.querySelectorAll("#home-alarms tbody tr").length > 0, htmlHome, { timeout: 30000 });
    check(await page.$$eval("img", (imgs) => imgs.length) === 0, "the HTML home id became an <img>");
    check(await page.title() === TITLE, `the page title changed to ${await page.title()}`);
    await page.screenshot({ path: path.join(shots, "home-html-id.png"), fullPage: true });

    // Operations: 16 partitions, each owned, and the pool's two instances.
    await show(page, "operations");
    await page.waitForFunction(() => {
      const rows = [...document.querySelectorAll("#ops-partitions tbody tr")];
      return rows.length === 16 && rows.every((r) => !r.children[1].textContent.includes("(none)"))
        && document.getElementById("ops-instance-count").textContent === "2";
    }, null, { timeout: 30000 });
    // The chart: the backlog and the instance count over the page's polls, the latter at 2.
    await page.waitForFunction(() => document.querySelectorAll("#ops-chart polyline").length === 2
      && document.querySelector("#ops-chart polyline[data-series=instances]").getAttribute("points").split(" ").length >= 3,
      null, { timeout: 30000 });
    const chartLabel = await page.$eval("#ops-chart", (c) => c.textContent);
    check(chartLabel.includes("instances (max 2)"), `operations chart: ${chartLabel}`);
    const lags = await page.$$eval("#ops-partitions tbody tr", (rows) => rows.map((r) => Number(r.children[4].textContent)));
    check(lags.every((n) => n >= 0), `negative lag on the page: ${lags}`);
    await page.screenshot({ path: path.join(shots, "operations.png"), fullPage: true });

    // Traces: the traced home's alarm, chosen, and its waterfall from the reading to this page.
    await show(page, "traces");
    await page.waitForFunction((h) => [...document.querySelectorAll("#traces-alarms tbody td:first-child")]
      .some((t) => t.textContent === h), tracedHome, { timeout: 30000 });
    await page.$$eval("#traces-alarms tbody tr", (rows, h) => {
      rows.find((r) => r.children[0].textContent === h).click();
    }, tracedHome);
    await page.waitForFunction((h) => document.getElementById("trace-title").textContent.includes(h),
      tracedHome, { timeout: 30000 });
    const hops = await page.$$eval("#trace-waterfall .hop", (rows) => rows.map((r) => r.children[0].textContent));
    check(hops.length >= 7, `waterfall rows: ${JSON.stringify(hops)}`);
    check(hops[0].startsWith("reading sent"), `first hop: ${hops[0]}`);
    check(hops.some((h) => h.startsWith("function SensorAggregator")), `hops: ${JSON.stringify(hops)}`);
    check(hops[hops.length - 1].startsWith("shown on this page"), `last hop: ${hops[hops.length - 1]}`);
    const bars = await page.$$eval("#trace-waterfall .bar", (bs) => bs.map((b) => parseFloat(b.style.left)));
    check(bars.every((left, i) => i === 0 || left >= bars[i - 1] - 0.001), `bars out of order: ${bars}`);
    await page.screenshot({ path: path.join(shots, "traces.png"), fullPage: true });

    check(problems.length === 0, problems.join("\n"));
    console.log(JSON.stringify({ firstRenderMs, sendToPageMs, sendToPushedMs }));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(String(e && e.stack || e));
  if (problems.length) console.error(problems.join("\n"));
  process.exit(1);
});
