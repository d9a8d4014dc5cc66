// Drives Debian's Chromium through playwright-core against a page that
// `octlm serve` (or an exported folder) serves, the way a person would use it:
// moves the width slider with the keyboard and checks the map re-rendered,
// switches learned/sinusoidal rows, then on a run's page types a token and
// reads its neighbours and looks at the run's attention, or on a length
// study's page switches readings and models and reads the table and the maps;
// on a run with a layer layout, reads each layer's row and opens its maps;
// or, served without --run or --study, reads what the last section says to
// do; and saves screenshots at laptop and phone width.
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
  const isStudy = (await page.locator("#study").count()) === 1;
  // Served without --run or --study: the playgrounds alone, and the commands that fill the last section.
  const isEmpty = !isStudy && (await page.locator("[data-testid=no-run]").count()) === 1;
  seen.view = isStudy ? "study" : isEmpty ? "none" : "run";
  check("page has eleven playgrounds and the run or study", (await page.locator("section.playground").count()) === 12, await page.locator("section.playground h2").allTextContents());
  if (isEmpty) seen["how to fill"] = await page.locator("#run").innerText();
  else if (!isStudy) check("the run is loaded", (await page.locator("[data-testid=no-run]").count()) === 0, await page.locator("#run h2").textContent());

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

  // The relative-position playgrounds draw their pictures, and xPos's score ignores a shift of both positions.
  check("T5 and FIRE maps are drawn", (await page.locator("#t5-map").getAttribute("data-shape")) === "48x48" && (await page.locator("#fire-map").getAttribute("data-shape")) === "64x64",
    [await page.locator("#t5-map").getAttribute("data-shape"), await page.locator("#fire-map").getAttribute("data-shape")]);
  const xposBase = await page.locator("[data-testid=xpos-score-base]").textContent();
  await page.locator("input[name=xpos-shift]").focus();
  await page.keyboard.press("End");
  const xposShifted = await page.locator("[data-testid=xpos-score-shifted]").textContent();
  check("xPos score unchanged by a shift of both positions", xposShifted === xposBase && (await page.locator("[data-testid=xpos-decay] svg polyline").count()) === 4, { xposBase, xposShifted });

  // FoX and stick-breaking: lowering every token's forget gate from the keyboard takes FoX's weight off the needle.
  const foxBefore = Number(await page.locator("[data-testid=gates-needle-fox]").textContent());
  const stick = Number(await page.locator("[data-testid=gates-needle-stick]").textContent());
  await page.locator("input[name=gates-gate]").focus();
  await page.keyboard.press("Home");
  const foxAfter = Number(await page.locator("[data-testid=gates-needle-fox]").textContent());
  seen.gates = { foxBefore, foxAfter, stick, lines: await page.locator("[data-testid=gates-chart] svg polyline").count() };
  check("FoX's needle weight falls when every gate is 0.5; stick-breaking's is unchanged", foxAfter < foxBefore && foxAfter < 0.01 && seen.gates.lines === 3
    && Number(await page.locator("[data-testid=gates-needle-stick]").textContent()) === stick, seen.gates);

  // The first layer's other half: the default kernel tells "the" at 0 from "the" at 4; the zero kernel gives the rows back.
  const canonGap = Number(await page.locator("[data-testid=layer-canon-gap]").textContent());
  await page.locator("select[name=layer-preset]").selectOption("zero");
  seen["first layer"] = { canonGap, moved: await page.locator("[data-testid=layer-canon-moved]").textContent(), read: await page.locator("[data-testid=layer-read]").textContent() };
  check("Canon tells a repeated token apart by its neighbours; a zero kernel gives the input back", canonGap > 0 && seen["first layer"].moved === "0.000000", seen["first layer"]);
  await page.locator("select[name=layer-preset]").selectOption("fading");

  // Why RoPE breaks past T: moving T from the keyboard redraws the chart of pairs x positions up to 4T and its count.
  const reach = page.locator("#rope-reach-map");
  const line = page.locator("[data-testid=rope-slow-pairs]");
  const reachBefore = { T: Number(await page.locator("input[name=rope-train-length]").inputValue()), line: await line.textContent(), shape: await reach.getAttribute("data-shape"), renders: Number(await reach.getAttribute("data-renders")) };
  await page.locator("input[name=rope-train-length]").focus();
  for (let i = 0; i < 4; i++) await page.keyboard.press("ArrowRight");
  const reachAfter = { T: Number(await page.locator("input[name=rope-train-length]").inputValue()), line: await line.textContent(), shape: await reach.getAttribute("data-shape"), renders: Number(await reach.getAttribute("data-renders")) };
  seen["rope reach"] = [reachBefore, reachAfter];
  check("RoPE's training length redraws pairs x 4T positions and the count", reachAfter.T === reachBefore.T + 32 && reachAfter.renders > reachBefore.renders && reachAfter.shape === `32x${4 * reachAfter.T}` && reachAfter.line !== reachBefore.line, seen["rope reach"]);

  if (isStudy) await studyChecks(page);
  else if (!isEmpty) await runChecks(page);

  check("no script errors", errors.length === 0, errors);
  check("nothing fetched from outside", external.length === 0, external);

  await page.evaluate(() => (document.activeElement instanceof HTMLElement ? document.activeElement.blur() : null));
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(outDir, "page-laptop.png") });
  await page.locator("#sinusoidal").screenshot({ path: join(outDir, "sinusoidal.png") });
  await page.locator(isStudy ? "#study" : "#run").screenshot({ path: join(outDir, isStudy ? "study.png" : "run.png") });
  if (!isEmpty) await page.locator(isStudy ? "#study-attention" : "#run-attention").screenshot({ path: join(outDir, isStudy ? "study-attention.png" : "run-attention.png") });
  const hasLayout = (await page.locator("#run-layout-panel").count()) === 1;
  if (hasLayout) await page.locator("#run-layout-panel").screenshot({ path: join(outDir, "run-layout.png") });
  await page.screenshot({ path: join(outDir, "page-laptop-full.png"), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(300);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check("no sideways scrolling at phone width", overflow <= 0, overflow);
  await page.evaluate(() => document.getElementById("sum")?.scrollIntoView());
  await page.screenshot({ path: join(outDir, "page-phone.png") });
  await page.screenshot({ path: join(outDir, "page-phone-full.png"), fullPage: true });
  const last = isStudy ? ["study.png", "study-attention.png"] : isEmpty ? ["run.png"] : ["run.png", "run-attention.png", ...(hasLayout ? ["run-layout.png"] : [])];
  seen.screenshots = ["page-laptop.png", "sinusoidal.png", ...last, "page-laptop-full.png", "page-phone.png", "page-phone-full.png"];
} catch (err) {
  code = 1;
  seen.error = String(err?.message ?? err);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
/** The run's own panels: its position map, nearest tokens, scatter and attention. */
async function runChecks(page) {
  // The run's position map: its own table versus the formula.
  const runMap = page.locator("#run-position-map");
  if (await page.locator("input[name=run-positions][value=run]").isEnabled()) {
    const own = await runMap.evaluate((c) => c.toDataURL());
    await page.locator("input[name=run-positions][value=sinusoidal]").check();
    check("run map switches to the sinusoidal formula", (await runMap.getAttribute("data-source")) === "sinusoidal" && (await runMap.evaluate((c) => c.toDataURL())) !== own, await runMap.getAttribute("data-source"));
    await page.locator("input[name=run-positions][value=run]").check();
  }

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

  seen["run attention head stats"] = await page.locator("#run-attention-heads [data-testid=head-stats]").allTextContents();  // at 1x T
  seen["run attention"] = await attentionChecks(page, "run-attention");
  // A run with a layer layout (--layers): one row per layer, and each layer's maps labelled with its spec.
  seen.layout = (await page.locator("[data-testid=layout-row]").count()) > 0 ? await layoutChecks(page) : null;
  // A RoPE run: its own pairs and its heads' entropy at each length.
  if ((await page.locator("#run-rope").count()) === 1) {
    seen["run rope"] = {
      line: await page.locator("[data-testid=run-rope-slow-pairs]").textContent(),
      shape: await page.locator("#run-rope-reach-map").getAttribute("data-shape"),
      entropyLines: await page.locator("#run-rope-entropy svg polyline").count(),
      dots: await page.locator("#run-rope-entropy svg circle title").allTextContents(),
    };
  }
}

/**
 * The probe panel under the explorer `id` at its shown length: each layer's first-token mass (one row a layer, as
 * many as the layer select offers), and each RoPE layer's chart and its heads' shares, or the note that there are none.
 */
async function probeChecks(page, id) {
  const rows = (locator) => locator.evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  const sink = await rows(page.locator(`[data-testid=${id}-sink-layers] tbody tr`));
  const layers = Math.max(1, await page.locator(`select[name=${id}-layer] option`).count());
  const charts = await page.locator(`#${id}-frequencies .multiple`).count();
  const none = await page.locator(`[data-testid=${id}-frequencies-none]`).count();
  check(`${id}: one first-token row per layer, and a frequency chart per RoPE layer or a note`, sink.length === layers && (charts > 0) !== (none === 1), { sink, charts, none });
  const shares = [];
  for (let i = 0; i < charts; i++) shares.push(await rows(page.locator(`#${id}-frequencies .multiple`).nth(i).locator("[data-testid=frequency-shares] tbody tr")));
  return { sink, charts, none, shares, lines: await page.locator(`#${id}-frequencies svg polyline`).count() };
}

/**
 * The attention explorer `id`: every head drawn at the first length, with its probes; lengths without maps are
 * disabled and say why; the longest length with maps redraws every head at that length.
 */
async function attentionChecks(page, id) {
  const heads = page.locator(`#${id}-heads canvas.attention-map`);
  const first = await page.locator(`#${id}-heads`).getAttribute("data-length");
  const n = await heads.count();
  check(`${id}: every head is drawn`, n >= 1 && (await page.locator(`#${id}-heads [data-testid=head-stats]`).count()) === n, { heads: n, length: first });
  const probes = await probeChecks(page, id);  // at the first length
  const radios = page.locator(`input[name=${id}-length]`);
  const lengths = [];
  for (let i = 0; i < (await radios.count()); i++) lengths.push({ value: await radios.nth(i).getAttribute("value"), enabled: await radios.nth(i).isEnabled() });
  const disabled = lengths.filter((l) => !l.enabled);
  const notes = await page.locator(`[data-testid=${id}-unavailable] p`).allTextContents();
  check(`${id}: each length without maps is disabled and says why`, disabled.length === notes.length && disabled.every((l, i) => notes[i].startsWith(`${l.value} tokens`)), { lengths, notes });
  const longest = [...lengths].reverse().find((l) => l.enabled);
  await page.locator(`input[name=${id}-length][value="${longest.value}"]`).check();
  const shape = await heads.first().getAttribute("data-shape");
  check(`${id}: the longest length redraws every head`, (await page.locator(`#${id}-heads`).getAttribute("data-length")) === longest.value && (await heads.count()) === n && (await page.locator(`#${id}-entropy svg polyline`).count()) === n + 1,
    { length: longest.value, shape, polylines: await page.locator(`#${id}-entropy svg polyline`).count() });
  return { lengths, notes, longestShape: shape, probes };
}

/**
 * The layout panel: each row's window and the span its bar draws at every sequence length offered; then, layer by
 * layer from the row's button, the attention explorer on that layer: its select, its spec line and every head's map
 * with the window it draws. Ends on layer 0, for the screenshots.
 */
async function layoutChecks(page) {
  const rows = page.locator("[data-testid=layout-row]");
  const read = () => rows.evaluateAll((trs) => trs.map((tr) => ({
    window: tr.querySelector("[data-testid=layout-window]").textContent,
    bar: tr.querySelector(".layout-track").getAttribute("aria-label"),
    cells: [...tr.cells].map((c) => c.textContent),
  })));
  const bars = {};
  const lengths = await page.locator("input[name=run-layout-length]").evaluateAll((inputs) => inputs.map((i) => i.value));
  for (const length of lengths) {
    await page.locator(`input[name=run-layout-length][value="${length}"]`).check();
    bars[length] = (await read()).map((r) => r.bar);
  }
  const shown = await read();
  const layers = [];
  for (let l = 0; l < shown.length; l++) {
    await page.locator(`#run-layout button[data-layer="${l}"]`).click();
    const grid = page.locator("#run-attention-heads");
    check(`layout: layer ${l}'s button shows its maps`, (await grid.getAttribute("data-layer")) === String(l), await grid.getAttribute("data-layer"));
    const select = page.locator("select[name=run-attention-layer]");
    layers.push({
      select: await select.evaluate((s) => s.selectedOptions[0].textContent),
      spec: await page.locator("[data-testid=run-attention-layer-spec]").textContent(),
      length: await grid.getAttribute("data-length"),
      maps: await grid.locator("canvas.attention-map").evaluateAll((cs) => cs.map((c) => ({ window: c.dataset.window, hidden: Number(c.dataset.windowHidden), shape: c.dataset.shape }))),
    });
  }
  check("layout: one row per layer, each layer's maps drawn", shown.length >= 1 && layers.every((x) => x.maps.length >= 1), { rows: shown.length, layers });
  await page.locator('#run-layout button[data-layer="0"]').click();
  return { rows: shown, bars, layers, positionNote: await page.locator("[data-testid=run-position-note]").textContent() };
}

/** A length study's panels: the table under both readings and each group, the curves, every model's attention. */
async function studyChecks(page) {
  const tableRows = () => page.locator("#study-bpb-table tbody tr").evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  const base = await tableRows();
  check("study table lists the models trained at T", base.length >= 2 && (await page.locator("[data-testid=study-bpb] svg polyline").count()) >= 1, base);
  seen["study table"] = base;
  const sliding = page.locator("input[name=study-reading][value=sliding_bpb]");
  if (await sliding.isEnabled()) {
    await sliding.check();
    seen["study sliding table"] = await tableRows();
    check("the sliding reading changes the table", (await page.locator("[data-testid=study-bpb]").getAttribute("data-reading")) === "sliding_bpb", seen["study sliding table"]);
    await page.locator("input[name=study-reading][value=bpb]").check();
  } else {
    const note = await page.locator("[data-testid=study-missing]").innerText();
    check("a study without the sliding reading says so", /sliding/.test(note) && (await page.locator("[data-testid=study-no-sliding]").count()) === 1, note);
  }
  const groups = await page.locator("input[name=study-group]").evaluateAll((inputs) => inputs.map((i) => i.value));
  seen["study groups"] = {};
  for (const group of groups) {
    await page.locator(`input[name=study-group][value=${group}]`).check();
    seen["study groups"][group] = (await tableRows()).map((r) => r[0]);
  }
  await page.locator(`input[name=study-group][value=${groups[0]}]`).check();
  check("each group shows its own models", groups.length >= 2 && new Set(Object.values(seen["study groups"]).flat()).size === Object.values(seen["study groups"]).flat().length, seen["study groups"]);
  const curves = await page.locator("#study-curves svg polyline").count();
  check("the fine-tuning curves are drawn", curves >= 1, curves);
  const models = await page.locator("select[name=study-attention-model] option").allTextContents();
  seen["study models"] = models;
  // The first model, then another trained at T, left shown at its longest length for the screenshots.
  for (const label of [models[0], models.find((m) => !m.includes("@") && !m.includes("+") && m !== models[0]) ?? models[0]]) {
    await page.locator("select[name=study-attention-model]").selectOption({ label });
    seen["study attention"] = { ...seen["study attention"], [label]: await attentionChecks(page, "study-attention") };
  }
  // The study's own statistics of the shown model and length, where it recorded them: the first model at its first length.
  await page.locator("select[name=study-attention-model]").selectOption({ label: models[0] });
  seen["study attention record"] = await page.locator("[data-testid=study-attention-record] tbody tr")
    .evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)));
  await page.locator("select[name=study-attention-model]").selectOption({ label: models.find((m) => !m.includes("@") && !m.includes("+") && m !== models[0]) ?? models[0] });
  const radios = page.locator("input[name=study-attention-length]:not([disabled])");
  await radios.nth((await radios.count()) - 1).check();
}

console.log(JSON.stringify({ ok: code === 0, checks: seen }));
process.exit(code);
