// The explorer view in headless Chromium (Debian's `chromium`, driven by playwright-core), run by
// tests/dashboard.rs against a live `hubhost demo` whose hub has the added hub `<hub>` with the
// Python SDK's varied events on partition 0:
//   node explorer.cjs <page URL> <hub> <screenshot dir>
// Fails (exit 1) on any console error, page error or dialog; when the view does not show the
// hubs, partitions, consumer groups and charts; when a peeked body made of HTML becomes markup;
// when the next page does not follow; when the added hub's Kafka consumer group is not listed;
// or when a send from the form is not acknowledged.
"use strict";

const { chromium } = require("playwright-core");
const path = require("path");

const [url, hub, shots] = process.argv.slice(2);
const problems = [];

function check(condition, message) {
  if (!condition) throw new Error(message);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.HUBHOST_CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`page error: ${e}`));
    page.on("dialog", (d) => { problems.push(`dialog: ${d.message()}`); d.dismiss(); });

    // The view: every hub in the selector; the sensors hub's partitions and consumer groups,
    // with owners, after a few polls (the charts need two to show a rate).
    await page.goto(`${url}/#explorer`);
    await page.waitForFunction(() => document.querySelectorAll("#ex-hub option").length >= 3, null, { timeout: 30000 });
    const hubs = await page.$$eval("#ex-hub option", (os) => os.map((o) => o.value));
    check(hubs.includes("sensors") && hubs.includes(hub), `hubs: ${JSON.stringify(hubs)}`);
    // It opens on the hub the functions are triggered by, not the first by name (alarms).
    const opened = await page.$eval("#ex-hub", (s) => s.value);
    check(opened === "sensors", `the explorer opened on ${opened}, not the triggered hub sensors`);
    await page.selectOption("#ex-hub", "sensors");
    await page.waitForFunction(() => {
      const rows = document.querySelectorAll("#ex-partitions tbody tr");
      const groups = [...document.querySelectorAll("#ex-groups tbody tr")].map((r) => r.textContent);
      const lines = document.querySelectorAll("#ex-rate-chart polyline");
      return rows.length === 16 && groups.some((g) => g.startsWith("$default") && g.includes("yes"))
        && lines.length === 16 && [...lines].some((l) => l.getAttribute("points").split(" ").length >= 3);
    }, null, { timeout: 30000 });
    await page.waitForFunction(() => document.querySelectorAll("#ex-lag-chart polyline").length >= 1
      && document.querySelectorAll("#ex-progress tbody tr").length === 16, null, { timeout: 30000 });
    const owners = await page.$$eval("#ex-progress tbody tr", (rows) => rows.map((r) => r.children[1].textContent));
    check(owners.every((o) => o !== "(none)"), `owners: ${JSON.stringify(owners)}`);
    await page.screenshot({ path: path.join(shots, "explorer.png"), fullPage: true });

    // Peek the added hub's partition 0 from the start: the HTML body stays text.
    await page.selectOption("#ex-hub", hub);
    await page.waitForFunction((h) => document.getElementById("ex-hub-title").textContent.startsWith(h), hub);
    // Its Kafka consumer group, with its committed partitions and no lag.
    await page.waitForFunction(() => !document.getElementById("ex-kafka").hidden, null, { timeout: 15000 });
    const kafka = await page.$$eval("#ex-kafka-groups tbody tr", (rows) => rows.map((r) => [...r.children].map((c) => c.textContent)));
    check(kafka.length === 1 && kafka[0][0] === "kafka-audit" && Number(kafka[0][3]) >= 1 && kafka[0][4] === "0",
      `Kafka groups: ${JSON.stringify(kafka)}`);
    await page.selectOption("#ex-peek-partition", "0");
    await page.selectOption("#ex-peek-from", "earliest");
    await page.fill("#ex-peek-count", "4");
    await page.click("#ex-peek");
    await page.waitForFunction(() => document.querySelectorAll("#ex-events .event").length === 4, null, { timeout: 15000 });
    const kinds = await page.$$eval("#ex-events pre.body", (pres) => pres.map((p) => p.className));
    check(JSON.stringify(kinds) === JSON.stringify(["body body-hex", "body body-json", "body body-text", "body body-text"]),
      `body kinds: ${JSON.stringify(kinds)}`);
    const html = await page.$eval("#ex-events .event:nth-child(3) pre", (p) => p.textContent);
    check(html === "<b>bold</b> & <script>alert(1)</script>", `the HTML body shows as ${html}`);
    check(await page.$$eval("#ex-events b, #ex-events script", (e) => e.length) === 0, "a peeked body became markup");
    const props = await page.$eval("#ex-events .event:nth-child(2) table.props-app", (t) => t.textContent);
    check(props.includes("flag") && props.includes("true"), `properties: ${props}`);
    await page.screenshot({ path: path.join(shots, "explorer-peek.png"), fullPage: true });
    // The next page follows the last event shown.
    await page.click("#ex-peek-next");
    await page.waitForFunction(() => {
      const first = document.querySelector("#ex-events .event");
      return first && first.dataset.sequenceNumber === "4";
    }, null, { timeout: 15000 });

    // Send from the form, to partition 1.
    await page.fill("#ex-send-body", "sent from Chromium");
    await page.fill("#ex-send-partition", "1");
    await page.fill("#ex-send-properties", "source=chromium");
    await page.click("#ex-send");
    await page.waitForFunction(() => document.getElementById("ex-send-status").textContent.startsWith("sent "), null, { timeout: 30000 });

    check(problems.length === 0, problems.join("\n"));
    console.log(JSON.stringify({ hubs: hubs.length }));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(String(e && e.stack || e));
  if (problems.length) console.error(problems.join("\n"));
  process.exit(1);
});
