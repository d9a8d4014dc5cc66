// Every head's attention on a piece of validation text, at the lengths a model was looked at:
// the run's own (octlm serve --run) and each model of a length study (octlm serve --study).
import type { Matrix } from "../math";
import { colorBar, heatmap, lineChart, type Heatmap, type Series } from "../plot";
import { showToken } from "../run/data";
import { append, clear, el, fmt, radios, select } from "../ui";
import { cellVisible, windowHiddenCells, type LayerView } from "../layout/data";
import { cellRange, hasMaps, times, unpackMaps, type MapSet } from "./data";
import { HEAD_COLORS, probePanel } from "./probeView";

export interface AttentionModel {
  label: string;
  /** The model's position scheme (for what to look for). */
  position: string;
  lengths: MapSet[];
  /** Each layer's scheme and window, for a model with a layer layout (--layers); absent without one. */
  layers?: LayerView[];
}

/** The event that brings layer `detail` of an explorer into view (showExplorerLayer). */
const SHOW_LAYER = "octlm-show-layer";

/** Show layer `layer` of the attention explorer `root` (from the layout panel's buttons). */
export function showExplorerLayer(root: HTMLElement, layer: number): void {
  root.dispatchEvent(new CustomEvent(SHOW_LAYER, { detail: layer }));
}

// What each scheme's maps should show past the training length, in a sentence; what every map shows is in GENERAL.
const LOOK_FOR: Record<string, string> = {
  learned: "A learned table has one row per position up to T and none after, so there is no attention to show past T: the page leaves those lengths empty rather than invent rows. (A study's learned@M× run stretched its table to M × T rows.)",
  sinusoidal: "Past T the sinusoidal rows added to the tokens are ones the model never saw in training: compare 2× with 1× for a band that blurs or a sink column that changes.",
  rope: "RoPE turns queries and keys by angles that grow with position; past T come angle differences the model never trained on: look at 2× and beyond for local bands that blur and attention that spreads or jumps. The scalings (linear, NTK, YaRN) squeeze the angles back into the trained range.",
  alibi: "ALiBi subtracts a penalty that grows with distance, so each head's attention fades with distance the same way at every length: past T the picture should look much like the one at T.",
  none: "No position signal at all: only the causal mask tells order. Heads can still find the first token (a sink) and recent tokens by counting through the mask.",
  t5: "T5 shares one learned bias for every distance past its maximum: past T, far keys all look alike to a head.",
  fire: "FIRE's network sees distances scaled by the query's position, always in [0, 1]: past T its pattern should stretch rather than break.",
  xpos: "xPos is RoPE with a decay along distance: past T, look for RoPE's changes, damped at long range.",
};

const GENERAL = "Each square is one head: row = query (a token predicting the next one), column = key (a token it may look at); darker = more attention, on a square-root scale; grey keys lie in the future. " +
  "A diagonal band: the head attends to recent tokens. A dark first column: an attention sink (attention parked on the first token). Even colour along a row: attention spread over everything.";

/** One line of what to look for with this scheme (empty for a scheme the page does not know). */
export function lookFor(position: string): string {
  return LOOK_FOR[position] ?? "";
}

/**
 * The attention explorer: a model select (several models), a length choice (lengths without maps are
 * disabled and say why), a layer select, every head's map and the entropy of its queries along the window, and
 * under them the probes of every layer at that length (first-token mass, RoPE's frequencies: probeView).
 */
export function attentionExplorer(opts: {
  id: string; models: AttentionModel[]; tokens: string[]; trainLength: number;
  /** More about the shown model, length and layer, under the heads (a study's own statistics). */
  extra?: (label: string, length: number, layer: number) => HTMLElement | null;
}): HTMLElement {
  const { id, models, tokens, trainLength } = opts;
  let model = 0;
  let length = 0;
  let layer = 0;
  const controls = el("div", { class: "controls" });
  const hint = el("div", { class: "look-for", "data-testid": `${id}-look-for` });
  const spec = el("p", { class: "layer-spec", "data-testid": `${id}-layer-spec` });
  const notes = el("div", { "data-testid": `${id}-unavailable` });
  const grid = el("div", { class: "multiples maps", id: `${id}-heads` });
  const entropy = el("div", { class: "narrow", id: `${id}-entropy` });
  const extraBox = el("div");
  const probes = probePanel(id);
  let maps: Heatmap[] = [];

  const current = () => models[model];
  const shown = () => current().lengths.find((m) => m.length === length);
  const pickLength = () => {
    const available = current().lengths.filter(hasMaps).map((m) => m.length);
    if (!available.includes(length)) length = available[0] ?? current().lengths[0]?.length ?? 0;
  };

  const drawControls = () => {
    clear(controls);
    if (models.length > 1) {
      const choice = select("Model", models.map((m, i) => [String(i), m.label]), String(model), (v) => {
        model = Number(v);
        pickLength();
        drawControls();
        draw();
      }, `${id}-model`);
      controls.append(choice.root);
    }
    const lengthChoice = radios("Length (tokens of validation text)", `${id}-length`,
      current().lengths.map((m) => [String(m.length), `${m.length} (${times(m.length, trainLength)})`]), String(length), (v) => {
        length = Number(v);
        draw();
      });
    current().lengths.forEach((m, i) => (lengthChoice.inputs[i].disabled = !hasMaps(m)));
    controls.append(lengthChoice.root);
    const first = current().lengths.find(hasMaps);
    const layers = first?.statistics?.mean_entropy.length ?? 0;
    if (layer >= layers) layer = 0;
    if (layers > 1) {
      const named = (l: number) => (current().layers?.[l] ? `layer ${l}: ${current().layers![l].description}` : `layer ${l}`);
      controls.append(select("Layer", Array.from({ length: layers }, (_, l) => [String(l), named(l)]), String(layer), (v) => {
        layer = Number(v);
        draw();
      }, `${id}-layer`).root);
    }
  };

  const draw = () => {
    const m = current();
    const layerView = m.layers?.[layer];
    const scheme = layerView?.position ?? m.position;
    const who = layerView ? `${m.label}, layer ${layer} (${scheme})` : m.label;
    clear(hint);
    append(hint, el("p", {}, GENERAL), lookFor(scheme) ? el("p", {}, el("strong", {}, `${who}: `), lookFor(scheme)) : null,
      layerView?.window ? el("p", {}, el("strong", {}, `Window of ${layerView.window}: `),
        `this layer's queries never see a key ${layerView.window} or more back, so at any length it meets only distances below ${layerView.window}, all of which training showed it: past T its band should look as it does at T.`) : null);
    spec.textContent = layerView ? layerSentence(layerView) : "";
    spec.hidden = !layerView;
    clear(notes);
    for (const missing of m.lengths.filter((x) => !hasMaps(x))) {
      notes.append(el("p", { class: "unavailable" }, `${missing.length} tokens (${times(missing.length, trainLength)}): ${missing.note ?? "not shown"}.`));
    }
    maps.forEach((h) => h.dispose());
    maps = [];
    clear(grid);
    clear(entropy);
    clear(extraBox);
    const set = shown();
    if (!set || !hasMaps(set)) {
      grid.append(el("p", { class: "note" }, "No attention to show for this model."));
      probes.show(undefined, trainLength);
      return;
    }
    const stats = set.statistics;
    const heads = stats.mean_entropy[0].length;
    const all = unpackMaps(set, stats.mean_entropy.length, heads);
    grid.dataset.length = String(set.length);
    grid.dataset.layer = String(layer);
    for (let h = 0; h < heads; h++) grid.append(headFigure(all[layer][h], set, { layer, head: h, view: layerView }, tokens, (map) => maps.push(map)));
    append(extraBox, opts.extra?.(m.label, set.length, layer));
    entropy.append(entropyChart(set, layer, trainLength));
    probes.show(set, trainLength, m.layers);
  };

  pickLength();
  drawControls();
  draw();
  const root = el("div", { class: "attention", id },
    controls, hint, el("div", { class: "narrow" }, colorBar({ kind: "sequential", min: 0, max: 1 }, "√ attention probability")), notes, spec, grid, extraBox,
    el("h3", {}, "Entropy along the window"),
    el("p", { class: "caption" }, "How spread out each head's attention is, by query position (nats; mean over each cell's queries). Uniform attention over the i + 1 keys a query sees gives ln(i + 1), the dashed line; a head far below it looks at a few keys. The vertical line marks the training length T."),
    entropy,
    probes.root,
  );
  root.addEventListener(SHOW_LAYER, (e) => {
    layer = (e as CustomEvent<number>).detail;
    drawControls();
    draw();
  });
  return root;
}

/** What a layer of a layout is, and for a window layer what its maps show. */
function layerSentence(view: LayerView): string {
  const what = `Layer ${view.layer}: ${view.description}.`;
  if (view.window === null) return `${what} Every query sees every earlier key.`;
  return `${what} Each query sees only its last ${view.window} keys (itself included): the band along the diagonal. Keys further back are hidden by the window and drawn grey, like the future.`;
}

function headFigure(matrix: Matrix, set: Required<Pick<MapSet, "block" | "side" | "statistics">> & MapSet, where: { layer: number; head: number; view?: LayerView }, tokens: string[], keep: (h: Heatmap) => void): HTMLElement {
  const { layer, head } = where;
  const span = where.view?.window ?? null;
  const map = heatmap(`attention of layer ${layer}${where.view ? ` (${where.view.description})` : ""} head ${head} at ${set.length} tokens`);
  keep(map);
  map.canvas.classList.add("attention-map");
  map.canvas.dataset.head = String(head);
  if (where.view) {
    // For the browser test: the window, and how many cells of this map it alone hides.
    map.canvas.dataset.window = span === null ? "global" : String(span);
    map.canvas.dataset.windowHidden = String(windowHiddenCells(set.side, set.block, set.length, span));
  }
  const outside = (r: number, c: number) => c <= r && !cellVisible(r, c, set.block, set.length, span);
  const sqrt: Matrix = { rows: matrix.rows, cols: matrix.cols, data: matrix.data.map(Math.sqrt) };
  const block = set.block;
  const label = (i: number) => (block === 1 && i < tokens.length ? ` “${showToken(tokens[i])}”` : "");
  map.draw(sqrt, {
    scale: { kind: "sequential", min: 0, max: 1 }, aspect: 1, xLabel: block === 1 ? "key position" : `key position (${block} a cell)`,
    yLabel: block === 1 ? "query position" : `query position (${block} a cell)`, cellSize: block,
    masked: (r, c) => c > r || outside(r, c),
    describe: (r, c, v) => {
      const hidden = c > r ? "future, hidden" : outside(r, c) ? `outside the ${span}-key window, hidden` : "";
      if (block === 1) return hidden ? `query ${r}, key ${c}: ${hidden}` : `query ${r}${label(r)} → key ${c}${label(c)}: ${fmt(v * v, 3)}`;
      const [q0, q1] = cellRange(r, block, set.length);
      const [k0, k1] = cellRange(c, block, set.length);
      return hidden ? `queries ${q0}–${q1}, keys ${k0}–${k1}: ${hidden}` : `queries ${q0}–${q1} → keys ${k0}–${k1}: ${fmt(v * v, 3)} (summed over the keys, mean over the queries)`;
    },
  });
  const s = set.statistics;
  const maxLogit = s.max_logit[layer][head];
  return el("div", { class: "multiple" },
    el("h3", {}, `head ${head}`),
    map.root,
    el("p", { class: "head-stats", "data-testid": "head-stats" },
      `entropy ${fmt(s.mean_entropy[layer][head], 2)} nats · distance ${fmt(s.mean_distance[layer][head], 1)} tokens · first token ${fmt(s.sink_mass[layer][head], 3)} · max logit ${maxLogit === null ? "?" : fmt(maxLogit, 1)}`),
  );
}

function entropyChart(set: Required<Pick<MapSet, "block" | "side" | "statistics">> & MapSet, layer: number, trainLength: number): HTMLElement {
  const centre = (i: number) => {
    const [a, b] = cellRange(i, set.block, set.length);
    return (a + b) / 2;
  };
  const series: Series[] = set.statistics.entropy[layer].map((values, h) => ({
    name: `head ${h}`, color: HEAD_COLORS[h % HEAD_COLORS.length], points: values.map((v, i) => [centre(i), v] as [number, number]),
  }));
  series.push({ name: "uniform, ln(i + 1)", color: "#555", dash: "6 4", points: set.statistics.uniform_entropy.map((v, i) => [centre(i), v] as [number, number]) });
  return lineChart(series, {
    title: `entropy of each head's attention along ${set.length} tokens, layer ${layer}`, xLabel: "query position", yLabel: "entropy (nats)",
    markers: set.length > trainLength ? [{ x: trainLength, label: "T" }] : [], legendBelow: true,
  });
}
