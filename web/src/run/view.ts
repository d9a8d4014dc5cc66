// "Your model": a trained run's position similarity map, nearest tokens, PCA scatter and loss curve.
import { cosineMatrix, nearest, sinusoidal, type Matrix } from "../math";
import { colorBar, heatmap, lineChart, scatter, type Scatter } from "../plot";
import { append, clear, el, fmt, radios, section, slider } from "../ui";
import { attentionExplorer, showExplorerLayer } from "../attention/view";
import { layoutPanel } from "../layout/view";
import type { LayerView } from "../layout/data";
import { lookupToken, showToken, unpack, type RunData } from "./data";
import { ropeRunPanel } from "./ropeRun";

export function runSection(run: RunData | undefined): HTMLElement {
  if (!run) return howToFill();
  const { root, body } = section("run", `Your model: ${run.name}`, [
    "Everything the playgrounds showed, on the model you trained. Tokens that appear in similar contexts end up with similar rows, ",
    "and a learned position table finds its own version of the sinusoidal band.",
  ]);
  const m = run.model;
  body.append(
    el("dl", { class: "facts" },
      ...fact("position scheme", run.layout ? `per layer: ${[...new Set(run.layout.map((l) => l.position))].join(", ")}` : m.position),
      ...(run.layout ? fact("layer layout", String(m.layers)) : []),
      ...fact("vocab_size × d_model", `${m.vocab_size} × ${m.d_model}`),
      ...fact("context_length", String(m.context_length)),
      ...fact("layers × heads", `${m.n_layers} × ${m.n_heads}`),
      ...fact("steps trained", run.summary.steps === null ? "?" : String(run.summary.steps)),
      ...fact("validation bits per byte", run.summary.val_bpb === null ? "?" : fmt(run.summary.val_bpb, 3)),
    ),
  );
  const table = unpack(run.embedding);
  const attention = attentionPanel(run);
  body.append(positionPanel(run), neighboursPanel(run, table));
  if (run.layout) body.append(runLayoutPanel(run, run.layout, attention.explorer));
  body.append(attention.root);
  // Which distances a layout's RoPE layers meet depends on their windows, not on T alone: the panel's account is a
  // one-scheme run's.
  const rope = run.layout ? null : ropeRunPanel(run);
  if (rope) body.append(rope);
  body.append(lossPanel(run));
  return root;
}

/**
 * The page served without --run or --study: the playgrounds need no model, and this section says which
 * commands put the learner's own model (or length study) here.
 */
function howToFill(): HTMLElement {
  const { root, body } = section("run", "Your model, or your study", [
    "The page was started without a run or a study, so the playgrounds above are all it shows. They need no model; ",
    "to see these ideas on a model you trained, make one and start the page on it.",
  ]);
  const step = (text: string, command: string, after: string) => el("li", {}, text, el("code", {}, command), after);
  body.append(
    el("div", { class: "panel", "data-testid": "no-run" },
      el("h3", {}, "Your model"),
      el("ol", {},
        step("Train one on the Python standard library's source (about 2 minutes on 2 CPU cores): ", "octlm train --out runs/stdlib", ""),
        el("li", {}, "Start the page on it: ", el("code", {}, "octlm serve --run runs/stdlib"),
          " (or write the page into a folder to open from disk: ", el("code", {}, "octlm export-web --run runs/stdlib --out DIR"), ")."),
      ),
      el("p", {}, "This section then shows its position similarity map, nearest tokens, embedding scatter, loss curve and attention at 1×, 2× and 4× its training length."),
      el("h3", {}, "Your length study"),
      el("ol", {},
        step("Train and score every position scheme past its training length (about 25 minutes): ", "octlm length --text tinyshakespeare --out DIR", ""),
        step("Start the page on it: ", "octlm serve --study DIR", ""),
      ),
      el("p", {}, "This section then shows bits per byte against length, the fine-tuning curves and every model's attention at every length."),
    ),
  );
  return root;
}

/** The layout panel of a run with --layers; its buttons bring a layer's attention maps into view. */
function runLayoutPanel(run: RunData, layers: LayerView[], explorer: HTMLElement | null): HTMLElement {
  const T = run.model.context_length;
  const shown = (run.attention?.lengths ?? []).map((s) => s.length);
  return layoutPanel({
    layers, layout: String(run.model.layers), trainLength: T, lengths: shown.length ? shown : [T, 2 * T, 4 * T],
    showLayer: explorer ? (layer) => {
      showExplorerLayer(explorer, layer);
      explorer.scrollIntoView({ block: "start" });
    } : undefined,
  });
}

function attentionPanel(run: RunData): { root: HTMLElement; explorer: HTMLElement | null } {
  const a = run.attention;
  const T = run.model.context_length;
  const explorer = a
    ? attentionExplorer({ id: "run-attention", models: [{ label: run.name, position: run.model.position, lengths: a.lengths, layers: run.layout ?? undefined }], tokens: a.tokens, trainLength: a.train_length })
    : null;
  const root = el("div", { class: "panel" },
    el("h3", {}, "Attention on the validation text"),
    el("p", { class: "caption" },
      `What every head attends to on the first ${T}, ${2 * T} and ${4 * T} tokens of the run's validation text: 1×, 2× and 4× the length it trained on (T = ${T}). `,
      "Past T the model meets positions it never trained on. Maps longer than 128 tokens are pooled: each cell is a block of positions."),
    explorer ?? el("p", { class: "note", "data-testid": "run-attention-none" }, "This run folder has no validation text (val.bin), or the page was exported before it showed attention: nothing to show."),
  );
  return { root, explorer };
}

function fact(name: string, value: string): HTMLElement[] {
  return [el("dt", {}, name), el("dd", {}, value)];
}

function positionPanel(run: RunData): HTMLElement {
  const own = run.positions ? unpack(run.positions) : null;
  const length = own?.rows ?? Math.min(run.model.context_length, 256);
  const formula = sinusoidal(length, run.model.d_model);
  const map = heatmap("position similarity map of the run");
  map.canvas.id = "run-position-map";
  const note = el("p", { class: "note", "data-testid": "run-position-note" });
  const ownLabel = own ? (run.positions!.source === "learned" ? "this run's learned table" : `this run's ${run.model.position} (computed)`) : `this run (${run.layout ? "a layer layout" : run.model.position}): no vectors`;
  let which = own ? "run" : "sinusoidal";
  const draw = () => {
    const vectors: Matrix = which === "run" && own ? own : formula;
    map.draw(cosineMatrix(vectors), {
      scale: { kind: "diverging", max: 1 }, xLabel: "position s", yLabel: "position t", aspect: 1,
      describe: (r, c, v) => `positions ${r} and ${c} (distance ${Math.abs(r - c)}): ${fmt(v, 3)}`,
    });
    map.canvas.dataset.source = which;
    note.textContent = which === "run" && own
      ? run.positions!.description
      : `The sinusoidal formula at this run's size (${length} positions × ${run.model.d_model} columns), for comparison. ${own ? "" : run.positions_note}`;
  };
  const choice = radios("Show", "run-positions", [["run", ownLabel], ["sinusoidal", "sinusoidal formula, same size"]], which, (v) => {
    which = v;
    draw();
  });
  if (!own) choice.inputs[0].disabled = true;
  draw();
  return el("div", { class: "panel" },
    el("h3", {}, "Position similarity"),
    el("p", { class: "caption" }, "Cosine similarity between the position vectors of every pair of positions. A learned table has to discover the diagonal band by itself; compare it with the formula."),
    el("div", { class: "controls" }, choice.root),
    el("div", { class: "narrow" }, map.root, colorBar({ kind: "diverging", max: 1 }, "similarity")),
    note,
  );
}

/** The token rows on their first two principal components, coloured by how often each was seen in training. */
function embeddingScatter(run: RunData): { plot: Scatter; maxLog: number } {
  const { tokens, counts } = run;
  const logCount = (i: number) => (counts ? Math.log10(1 + counts[i]) : 0);
  const maxLog = counts ? Math.max(...counts.map((c) => Math.log10(1 + c))) : 1;
  const points = run.pca.x.map((x, i) => ({ x, y: run.pca.y[i], label: showToken(tokens[i]), value: logCount(i) }));
  const plot = scatter(points, {
    title: "token embeddings projected on their first two principal components",
    xLabel: `PC1 (${fmt(100 * run.pca.explained[0], 1)}% of variance)`,
    yLabel: `PC2 (${fmt(100 * run.pca.explained[1], 1)}% of variance)`,
    valueLabel: "log10(1 + count)",
    scale: { kind: "sequential", min: 0, max: maxLog || 1 },
    describe: (i) => `“${showToken(tokens[i])}” #${i}${counts ? `, seen ${counts[i]} times in training` : ""}`,
  });
  plot.canvas.id = "run-scatter";
  return { plot, maxLog };
}

/** The ranked neighbours of one token: rank, token (a button to follow it), ID, cosine and, with counts, times seen. */
function neighbourTable(near: Array<{ index: number; score: number }>, counts: number[] | null, suggestion: (i: number) => HTMLElement): HTMLElement {
  return el("table", { class: "ranked", id: "neighbour-table" },
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "rank"), el("th", { scope: "col" }, "token"), el("th", { scope: "col" }, "ID"), el("th", { scope: "col" }, "cosine"), ...(counts ? [el("th", { scope: "col" }, "seen")] : []))),
    el("tbody", {}, ...near.map((n, r) =>
      el("tr", {},
        el("td", {}, String(r + 1)),
        el("td", {}, suggestion(n.index)),
        el("td", {}, String(n.index)),
        el("td", { class: "num" }, fmt(n.score, 3)),
        ...(counts ? [el("td", { class: "num" }, String(counts[n.index]))] : []),
      ),
    )),
  );
}

/** The most frequent word-like token (two letters or more, a space before allowed), so the table is never empty on
 * arrival; the first token without counts. */
function startToken(tokens: string[], counts: number[] | null): number {
  let start = 0;
  if (counts) {
    for (let i = 0; i < tokens.length; i++) {
      if (/^ ?[A-Za-z]{2,}$/.test(tokens[i]) && (!/^ ?[A-Za-z]{2,}$/.test(tokens[start]) || counts[i] > counts[start])) start = i;
    }
  }
  return start;
}

function neighboursPanel(run: RunData, table: Matrix): HTMLElement {
  const { tokens, counts } = run;
  const shown = tokens.map(showToken);
  const { plot, maxLog } = embeddingScatter(run);
  const listId = "token-list";
  const datalist = el("datalist", { id: listId }, ...shown.map((t) => el("option", { value: t })));
  const input = el("input", { type: "text", id: "token-query", list: listId, value: "", autocomplete: "off", spellcheck: "false", placeholder: "e.g. the, ␣king, #42" });
  let k = 10;
  const results = el("div", { class: "neighbours", "aria-live": "polite", "data-testid": "neighbours" });
  const search = () => {
    clear(results);
    const found = lookupToken(input.value, tokens, shown);
    if (found.id === null) {
      results.append(el("p", { class: "note" }, found.message));
      if (found.suggestions.length) {
        results.append(el("p", { class: "suggestions" }, ...found.suggestions.map((i) => suggestion(i))));
      }
      plot.highlight([]);
      return;
    }
    const id = found.id;
    const near = nearest(table, id, k);
    const spaced = shown.indexOf(`␣${shown[id]}`);
    append(results,
      el("p", {}, `Nearest tokens to “${showToken(tokens[id])}” (#${id}, found ${found.how}), by cosine similarity:`),
      spaced >= 0 && found.how === "as typed" ? el("p", { class: "note" }, "The same word after a space is another token: ", suggestion(spaced)) : null,
      neighbourTable(near, counts, suggestion),
    );
    plot.highlight([id, ...near.map((n) => n.index)]);
  };
  const suggestion = (i: number) => {
    const b = el("button", { type: "button", class: "token", title: `show the neighbours of #${i}` }, showToken(tokens[i]));
    b.addEventListener("click", () => {
      input.value = showToken(tokens[i]);
      search();
    });
    return b;
  };
  input.addEventListener("input", search);
  input.addEventListener("change", search);
  const kSlider = slider("Neighbours", 1, 30, 1, k, (v) => { k = v; search(); }, String, "run-k");
  input.value = shown[startToken(tokens, counts)];
  search();
  return el("div", { class: "panel" },
    el("h3", {}, "Nearest tokens and the embedding map"),
    el("p", { class: "caption" },
      "Type a token (a space before a word is part of the token: “␣the”), or #ID. The table lists the tokens whose rows point the same way. ",
      "The scatter flattens all ", String(tokens.length), " rows onto their two main directions (PCA); hover over a point to read it. ",
      counts ? "Colour is how often the token appears in the training text: tokens never seen keep drifting together." : ""),
    el("div", { class: "controls" },
      el("div", { class: "control" }, el("label", { for: "token-query" }, "Token"), input, datalist),
      kSlider.root,
    ),
    el("div", { class: "pair" }, results, el("div", {}, plot.root, counts ? colorBar({ kind: "sequential", min: 0, max: maxLog }, "log10(1 + count)") : null)),
  );
}

function lossPanel(run: RunData): HTMLElement {
  const train = run.loss.train.map(([s, l]) => [s, l] as [number, number]);
  const val = run.loss.eval.map(([s, l]) => [s, l] as [number, number]);
  return el("div", { class: "panel" },
    el("h3", {}, "Loss curve"),
    el("p", { class: "caption" }, "Cross-entropy in nats per token: the training loss averaged over each logging window, and the validation loss at every evaluation."),
    el("div", { class: "narrow", id: "run-loss" },
      lineChart([
        { name: "training loss", points: train, color: "#1f77b4" },
        { name: "validation loss", points: val, color: "#d62728", dots: true },
      ], { title: "loss curve", xLabel: "step", yLabel: "loss (nats per token)" }),
    ),
  );
}
