// Playground 11: the first layer's other half. Beside the plain token row, a hashed bigram row and a value
// embedding (more tables per token), and a Canon layer, which gives a model without positions its neighbours' order.
import { CANON_TAPS, addValueRows, bigramRows, canon, lookup, sharedKernel, valueGates } from "../firstLayer";
import { gaussianMatrix, matrix, row, type Matrix } from "../math";
import { cssColor } from "../plot";
import { clear, el, fmt, numberGrid, section, select, slider, type Slider } from "../ui";
import { TOY_STD, TOY_WIDTH, WORDS, colLabels, tokenTable } from "./vocab";

const HEADS = 2;
/** The Canon kernel the playground starts with, j = 0 (the token itself) first: the three before it, fading. */
export const DEFAULT_TAPS = [0, 1, 0.5, 0.25];
export const KERNEL_PRESETS: Array<[string, string, number[]]> = [
  ["fading", "fading: 0, 1, 0.5, 0.25", DEFAULT_TAPS],
  ["zero", "zero: the residual alone", [0, 0, 0, 0]],
  ["previous", "add the previous token", [0, 1, 0, 0]],
  ["mean", "mean of the last four", [0.25, 0.25, 0.25, 0.25]],
  ["shift", "the previous token instead", [-1, 1, 0, 0]],
];

const valueTable = gaussianMatrix(WORDS.length, TOY_WIDTH, TOY_STD, 41);
const valueProjection = gaussianMatrix(TOY_WIDTH, TOY_WIDTH, 1 / Math.sqrt(TOY_WIDTH), 43);
const gateDirections = gaussianMatrix(HEADS, TOY_WIDTH, 1, 47);

/**
 * The page's bigram table [rows, C]: random, so the rows show, except the last one, which only a sequence's first
 * token reads; it is kept at zero so that token's vector is its plain row (octlm starts every row at zero and learns them).
 */
export function bigramTable(rows: number): Matrix {
  const table = gaussianMatrix(rows, TOY_WIDTH, TOY_STD, 31);
  table.data.fill(0, (rows - 1) * TOY_WIDTH);
  return table;
}

/** Everything the playground shows for token ids [T], a bigram table of `rows`, the gate weights' scale and the Canon
 * taps [4]: each a [T, C] matrix but `read` [T] and `gates` [T, H]. */
export function firstLayerNumbers(ids: number[], rows: number, gateScale: number, taps: number[]) {
  const tokens = lookup(tokenTable, ids);
  const read = bigramRows(ids, rows);
  const bigram = lookup(bigramTable(rows), read);
  const input = matrix(ids.length, TOY_WIDTH);
  for (let i = 0; i < input.data.length; i++) input.data[i] = tokens.data[i] + bigram.data[i];
  // The values are the layer's own projection of its input; the gate reads the same input.
  const values = matrix(ids.length, TOY_WIDTH);
  for (let t = 0; t < ids.length; t++) {
    for (let c = 0; c < TOY_WIDTH; c++) {
      for (let i = 0; i < TOY_WIDTH; i++) values.data[t * TOY_WIDTH + c] += input.data[t * TOY_WIDTH + i] * valueProjection.data[i * TOY_WIDTH + c];
    }
  }
  const weights = { ...gateDirections, data: gateDirections.data.map((w) => w * gateScale) };
  return {
    tokens, read, bigram, input, values,
    gates: valueGates(input, weights),
    valueRows: lookup(valueTable, ids),
    valuesAfter: addValueRows(values, input, valueTable, weights, ids),
    canonOut: canon(tokens, sharedKernel(taps, TOY_WIDTH)),
  };
}

/** The first token that appears twice, as [first, second] positions, or null. */
export function repeatedToken(ids: number[]): [number, number] | null {
  for (let a = 0; a < ids.length; a++) for (let b = a + 1; b < ids.length; b++) if (ids[a] === ids[b]) return [a, b];
  return null;
}

const SCALE = { kind: "diverging" as const, max: 2 };

function grid(m: Matrix, labels: string[], caption: string, testid: string, cols = colLabels(m.cols)): HTMLElement {
  const g = numberGrid(Array.from({ length: m.rows }, (_, t) => row(m, t)), { rowLabels: labels, colLabels: cols, color: (v) => cssColor(v, SCALE), caption });
  g.dataset.testid = testid;
  return g;
}

const op = (text: string) => el("span", { class: "op", "aria-hidden": "true" }, text);

function tablesPart(n: ReturnType<typeof firstLayerNumbers>, ids: number[], labels: string[], rows: number): HTMLElement[] {
  const bigramLabels = labels.map((l, t) => `${l} · row ${n.read[t]}`);
  const gateGrid = numberGrid(Array.from({ length: n.gates.rows }, (_, t) => row(n.gates, t)), {
    rowLabels: labels, colLabels: ["h0", "h1"], digits: 3, caption: "gate 2σ(w·u) per head",
    color: (v) => cssColor(v, { kind: "sequential", min: 0, max: 2 }),
  });
  gateGrid.dataset.testid = "layer-gates";
  return [
    el("h3", {}, "A bigram row beside the token row"),
    el("div", { class: "equation" },
      grid(n.tokens, labels, "token rows (the plain table)", "layer-tokens"), op("+"),
      grid(n.bigram, bigramLabels, `bigram rows (of ${rows})`, "layer-bigram"), op("="),
      grid(n.input, labels, "the layer's input u", "layer-input"),
    ),
    el("p", { class: "note", "data-testid": "layer-read" }, `rows read: ${n.read.join(", ")}. `, collisionNote(ids, n.read)),
    el("h3", {}, "A value embedding: a token table for a layer's values"),
    el("div", { class: "equation" },
      grid(n.values, labels, "values v = u·W (heads h0 | h1)", "layer-values"), op("+"),
      gateGrid, op("×"),
      grid(n.valueRows, labels, "value rows (a second token table)", "layer-value-rows"), op("="),
      grid(n.valuesAfter, labels, "values the layer attends with", "layer-values-after"),
    ),
  ];
}

/** Positions whose different (previous, current) pairs hash to one row [a, b]: the price of fewer rows than pairs. */
export function collisions(ids: number[], read: number[]): Array<[number, number]> {
  const found: Array<[number, number]> = [];
  for (let a = 1; a < ids.length; a++) {
    for (let b = a + 1; b < ids.length; b++) {
      if (read[a] === read[b] && (ids[a - 1] !== ids[b - 1] || ids[a] !== ids[b])) found.push([a, b]);
    }
  }
  return found;
}

function collisionNote(ids: number[], read: number[]): string {
  const found = collisions(ids, read);
  if (!found.length) return "No two different pairs share a row; lower N to make some collide.";
  return `Different pairs sharing a row (a collision the model cannot tell apart): ${found.map(([a, b]) => `positions ${a} and ${b}`).join("; ")}.`;
}

function canonPart(n: ReturnType<typeof firstLayerNumbers>, ids: number[], labels: string[], taps: number[]): HTMLElement[] {
  const moved = Math.max(...n.canonOut.data.map((v, i) => Math.abs(v - n.tokens.data[i])));
  return [
    el("h3", {}, "Canon: each token reads the three before it"),
    el("div", { class: "equation" },
      grid(n.tokens, labels, "token rows, no positions", "layer-canon-in"), op("→"),
      grid(n.canonOut, labels, `output, w = ${taps.map((w) => fmt(w, 2)).join(", ")}`, "layer-canon-out"),
    ),
    el("p", { class: "note" }, "largest change from the input: ", el("strong", { "data-testid": "layer-canon-moved" }, fmt(moved, 6)),
      moved === 0 ? " (a zero kernel leaves the residual alone: the output is the input)" : ""),
    canonBox(n, ids, taps),
  ];
}

function canonBox(n: ReturnType<typeof firstLayerNumbers>, ids: number[], taps: number[]): HTMLElement {
  const box = el("div", { class: "verdict", "data-testid": "layer-canon-compare" });
  const pair = repeatedToken(ids);
  if (!pair) {
    box.append("Choose the same token at two positions to compare their outputs.");
    return box;
  }
  const [a, b] = pair;
  // By the formula, the two outputs differ by the weighted rows before each (zeros before the sequence).
  const before = (t: number, c: number) => taps.reduce((sum, w, j) => sum + (j > 0 && t - j >= 0 ? w * n.tokens.data[(t - j) * TOY_WIDTH + c] : 0), 0);
  const outDiff = Array.from(row(n.canonOut, b), (v, c) => v - row(n.canonOut, a)[c]);
  const neighbours = outDiff.map((_, c) => before(b, c) - before(a, c));
  const size = Math.max(...outDiff.map(Math.abs));
  box.append(
    el("p", {}, `“${WORDS[ids[a]]}” sits at positions ${a} and ${b}, with the same token row. Its outputs differ by the weighted rows before each:`),
    numberGrid([outDiff, neighbours], { rowLabels: [`out ${b} − out ${a}`, "Σ_(j≥1) w_j (h_(" + b + "−j) − h_(" + a + "−j))"], colLabels: colLabels(TOY_WIDTH), color: (v) => cssColor(v, SCALE) }),
    el("p", {}, "largest difference between the outputs: ", el("strong", { "data-testid": "layer-canon-gap" }, fmt(size, 6)),
      size > 0 ? " — the order of its neighbours, with no position scheme." : " — the same: the kernel reads no neighbours, or they are the same."),
  );
  return box;
}

export function firstLayerPlayground(): HTMLElement {
  const { root, controls, body } = section("firstlayer", "11 · The first layer's other half: bigram rows, value embeddings, Canon", [
    "A token can become more than one row. A hashed bigram table (Huang et al. 2025) adds a row picked by the previous ",
    "token and this one, (previous × 1000003 + current) mod (N − 1), so “the” after “on” and “the” at the start get different ",
    "vectors; the first token reads the last row, kept at zero here. A value embedding (Zhou et al. 2024) adds a second token ",
    "table to a layer's values, each head through a gate 2σ(w·u) of the layer's input: at scale 0 every gate is 1, as octlm starts. ",
    "A Canon layer (Allen-Zhu 2025) adds to each row a weighted sum of its own and the three rows before it, so the same token ",
    "after different neighbours comes out different, with no position scheme at all; set the kernel to zero and the residual ",
    "gives the input back. Notice the box: the two outputs of a repeated token differ by exactly its neighbours' weighted rows.",
  ]);
  const ids = [0, 1, 2, 3, 0, 4]; // the cat sat on the mat
  const s = { rows: 40, gate: 1, taps: [...DEFAULT_TAPS] };
  const render = () => {
    const n = firstLayerNumbers(ids, s.rows, s.gate, s.taps);
    const labels = ids.map((id, t) => `${t}: ${WORDS[id]}`);
    clear(body);
    body.append(...tablesPart(n, ids, labels, s.rows), ...canonPart(n, ids, labels, s.taps));
  };
  const selects = el("div", { class: "token-selects" });
  ids.forEach((id, t) => {
    selects.append(select(`Position ${t}`, WORDS.map((w, i) => [String(i), `${i}: ${w}`]), String(id), (v) => { ids[t] = Number(v); render(); }, `layer-token-${t}`).root);
  });
  const preset = select("Canon kernel", [...KERNEL_PRESETS.map(([v, text]) => [v, text] as [string, string]), ["custom", "custom (the sliders)"]], "fading", (v) => {
    const taps = KERNEL_PRESETS.find(([name]) => name === v)?.[2];
    if (!taps) return;
    taps.forEach((w, j) => { s.taps[j] = w; tapSliders[j].set(w); });
    render();
  }, "layer-preset");
  const tapSliders: Slider[] = Array.from({ length: CANON_TAPS }, (_, j) => slider(j === 0 ? "w0: the token itself" : `w${j}: ${j} back`, -1, 1, 0.05, s.taps[j], (v) => {
    s.taps[j] = v;
    preset.input.value = "custom";
    render();
  }, (v) => fmt(v, 2), `layer-w${j}`));
  controls.append(
    selects,
    slider("Bigram table rows N", 2, 64, 1, s.rows, (v) => { s.rows = v; render(); }, String, "layer-rows").root,
    slider("Value gate weights, scale", -3, 3, 0.1, s.gate, (v) => { s.gate = v; render(); }, (v) => fmt(v, 1), "layer-gate").root,
    preset.root, ...tapSliders.map((t) => t.root),
  );
  render();
  return root;
}
