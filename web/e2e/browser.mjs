// Drives Debian's Chromium through playwright-core against a page that
// `octlm serve` (or an exported folder) serves, the way a person would use it:
// moves the width slider with the keyboard and checks the map re-rendered,
// types a token and reads its neighbours, switches learned/sinusoidal rows,
// and saves screenshots at laptop and phone width.
//
//   node e2e/browser.mjs URL OUT_DIR [--screenshots-only]
//
// Prints one JSON object (the checks and what they saw) and exits 1 on the
// first failed check, naming it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [url, outDir] = process.argv.slice(2);
if (!url || !outDir) {
  console.error("usage: node e2e/browser.mjs URL OUT_DIR");
  process.exit(2);
}
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const profile = mkdtempSync(join(tmpdir(), "octlm-chromium-"));
const seen = {};
const errors = [];

function check(name, ok, detail) {
  seen[name] = detail;
  if (!ok) throw new Error(`check failed: ${name}: ${JSON.stringify(detail)}`);
}

// A persistent context is how playwright passes --user-data-dir: a fresh profile per run.
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
let code = 0;
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => errors.push(String(err)));
  page.on("console", (msg) => msg.type() === "error" && errors.push(msg.text()));
  const external = [];
  page.on("request", (req) => {
    const u = new URL(req.url());
    if (!["127.0.0.1", "localhost", "[::1]", ""].includes(u.hostname) && u.protocol !== "data:" && u.protocol !== "file:") external.push(req.url());
  });
  await page.goto(url, { waitUntil: "load" });
  await page.waitForSelector("body[data-ready=true]", { timeout: 20000 });
  check("page has eight playgrounds and the run", (await page.locator("section.playground").count()) === 9, await page.locator("section.playground h2").allTextContents());
  check("the run is loaded", (await page.locator("[data-testid=no-run]").count()) === 0, await page.locator("#run h2").textContent());

  // Every control has a label.
  const unlabelled = await page.evaluate(() =>
    [...document.querySelectorAll("input, select")].filter((c) => !c.labels || c.labels.length === 0).map((c) => c.outerHTML.slice(0, 80)),
  );
  check("every control is labelled", unlabelled.length === 0, unlabelled);

  // Width slider, from the keyboard: the similarity map re-renders at the new width.
  const map = page.locator("#sinusoidal-map");
  const before = { renders: Number(await map.getAttribute("data-renders")), pixels: await map.evaluate((c) => c.toDataURL()) };
  const width = page.locator("input[name=sinusoidal-width]");
  const widthBefore = Number(await width.inputValue());
  await width.focus();
  for (let i = 0; i < 10; i++) await page.keyboard.press("ArrowLeft");
  const widthAfter = Number(await width.inputValue());
  const after = { renders: Number(await map.getAttribute("data-renders")), pixels: await map.evaluate((c) => c.toDataURL()) };
  check("width slider moves with the arrow keys", widthAfter === widthBefore - 10, { widthBefore, widthAfter });
  check("similarity map re-rendered", after.renders > before.renders && after.pixels !== before.pixels, { rendersBefore: before.renders, rendersAfter: after.renders, pixelsChanged: after.pixels !== before.pixels });
  const shownWidth = await page.locator("input[name=sinusoidal-width] + output").textContent();
  check("slider shows its value", shownWidth === String(widthAfter), shownWidth);

  // Learned / sinusoidal switch in the token + position playground.
  const positions = page.locator("[data-testid=sum-positions]");
  const tokensBefore = await page.locator("[data-testid=sum-tokens]").innerText();
  const learned = await positions.innerText();
  await page.locator("input[name=sum-kind][value=sinusoidal]").check();
  const sinus = await positions.innerText();
  check("switching to sinusoidal changes the position rows only", sinus !== learned && tokensBefore === (await page.locator("[data-testid=sum-tokens]").innerText()) && sinus.includes("sinusoidal"), { learned: learned.slice(0, 60), sinusoidal: sinus.slice(0, 60) });
  const compare = await page.locator("[data-testid=sum-compare]").innerText();
  check("same token at two positions differs only by the position rows", /largest gap between the two rows: 0\.000000/.test(compare), compare);
  await page.locator("input[name=sum-kind][value=learned]").check();

  // The run's position map: its own table versus the formula.
  const runMap = page.locator("#run-position-map");
  if (await page.locator("input[name=run-positions][value=run]").isEnabled()) {
    const own = await runMap.evaluate((c) => c.toDataURL());
    await page.locator("input[name=run-positions][value=sinusoidal]").check();
    check("run map switches to the sinusoidal formula", (await runMap.getAttribute("data-source")) === "sinusoidal" && (await runMap.evaluate((c) => c.toDataURL())) !== own, await runMap.getAttribute("data-source"));
    await page.locator("input[name=run-positions][value=run]").check();
  }

  // The relative-position playgrounds draw their pictures, and xPos's score ignores a shift of both positions.
  check("T5 and FIRE maps are drawn", (await page.locator("#t5-map").getAttribute("data-shape")) === "48x48" && (await page.locator("#fire-map").getAttribute("data-shape")) === "64x64",
    [await page.locator("#t5-map").getAttribute("data-shape"), await page.locator("#fire-map").getAttribute("data-shape")]);
  const xposBase = await page.locator("[data-testid=xpos-score-base]").textContent();
  await page.locator("input[name=xpos-shift]").focus();
  await page.keyboard.press("End");
  const xposShifted = await page.locator("[data-testid=xpos-score-shifted]").textContent();
  check("xPos score unchanged by a shift of both positions", xposShifted === xposBase && (await page.locator("[data-testid=xpos-decay] svg polyline").count()) === 4, { xposBase, xposShifted });

  // Type a token and read its neighbours.
  const query = page.locator("#token-query");
  await query.fill("");
  await query.pressSequentially(process.env.OCTLM_E2E_TOKEN ?? "the", { delay: 20 });
  const rows = page.locator("#neighbour-table tbody tr");
  await rows.first().waitFor({ timeout: 5000 });
  const neighbours = await rows.evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  const scores = neighbours.map((r) => Number(r[3]));
  check("typed token shows neighbours with cosine scores", neighbours.length >= 5 && scores.every((s) => s <= 1 && s >= -1) && scores.every((s, i) => i === 0 || s <= scores[i - 1]), neighbours.slice(0, 5));
  seen.heading = await page.locator("[data-testid=neighbours] p").first().textContent();

  // Hover over the scatter shows a token label.
  const box = await page.locator("#run-scatter").boundingBox();
  check("scatter is drawn", box !== null && box.width > 100 && box.height > 100, box);

  check("no script errors", errors.length === 0, errors);
  check("nothing fetched from outside", external.length === 0, external);

  await page.evaluate(() => (document.activeElement instanceof HTMLElement ? document.activeElement.blur() : null));
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(outDir, "page-laptop.png") });
  await page.locator("#sinusoidal").screenshot({ path: join(outDir, "sinusoidal.png") });
  await page.locator("#run").screenshot({ path: join(outDir, "run.png") });
  await page.screenshot({ path: join(outDir, "page-laptop-full.png"), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check("no sideways scrolling at phone width", overflow <= 0, overflow);
  await page.evaluate(() => document.getElementById("sum")?.scrollIntoView());
  await page.screenshot({ path: join(outDir, "page-phone.png") });
  await page.screenshot({ path: join(outDir, "page-phone-full.png"), fullPage: true });
  seen.screenshots = ["page-laptop.png", "sinusoidal.png", "run.png", "page-laptop-full.png", "page-phone.png", "page-phone-full.png"];
} catch (err) {
  code = 1;
  seen.error = String(err?.message ?? err);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify({ ok: code === 0, checks: seen }));
process.exit(code);
