// "Which layers see how far": a run's layer layout (--layers), one row per layer: its scheme, the keys the last query
// of a sequence sees drawn against the whole sequence, its RoPE base, log-scaled queries and QK-norm, and a button to
// that layer's attention maps.
import { times } from "../attention/data";
import { append, clear, el, radios } from "../ui";
import { lastQueryKeys, windowLabel, type LayerView } from "./data";

/**
 * The layout panel. `lengths` are the sequence lengths offered (the run's T, 2T and 4T); `showLayer`, when given,
 * brings a layer's attention maps into view.
 */
export function layoutPanel(opts: { layers: LayerView[]; layout: string; trainLength: number; lengths: number[]; showLayer?: (layer: number) => void }): HTMLElement {
  const { layers, trainLength } = opts;
  const lengths = opts.lengths.length ? opts.lengths : [trainLength];
  let length = lengths[0];
  const body = el("tbody");
  const head = el("th", { scope: "col" });
  const table = el("table", { class: "values layout", id: "run-layout" },
    el("caption", {}, "one row per layer, first layer at the top"),
    el("thead", {}, el("tr", {},
      ...["layer", "scheme"].map((t) => el("th", { scope: "col" }, t)), head,
      ...["window", "RoPE base", "log-scaled queries", "QK-norm", ""].map((t) => el("th", { scope: "col" }, t)))),
    body,
  );
  const draw = () => {
    head.textContent = `keys the last query of ${length} tokens sees`;
    clear(body);
    for (const layer of layers) body.append(layerRow(layer, length, opts.showLayer));
  };
  const choice = radios("Sequence length", "run-layout-length", lengths.map((n) => [String(n), `${n} (${times(n, trainLength)})`]), String(length), (v) => {
    length = Number(v);
    draw();
  });
  draw();
  const windows = layers.filter((l) => l.window !== null).length;
  return el("div", { class: "panel", id: "run-layout-panel" },
    el("h3", {}, "Which layers see how far"),
    el("p", { class: "caption" },
      "This run has a layer layout (", el("code", {}, `--layers "${opts.layout}"`), `): ${windows} of its ${layers.length} layers attend through a sliding window, the rest globally. `,
      "A window layer's query i sees only keys i − W < j ≤ i, its last W tokens itself included, however long the sequence; a global layer's sees every earlier key. ",
      "Each bar is the whole sequence; the dark span is what its last query sees. Windowed layers look the same at every length, global ones reach further as it grows."),
    el("div", { class: "controls" }, choice.root),
    el("div", { class: "grid-wrap" }, table),
  );
}

function layerRow(layer: LayerView, length: number, showLayer?: (layer: number) => void): HTMLElement {
  const [first, count] = lastQueryKeys(length, layer.window);
  const span = el("div", { class: "layout-span" });
  span.style.left = `${(100 * first) / length}%`;
  span.style.width = `${(100 * count) / length}%`;
  const words = `keys ${first}–${length - 1}: ${count} of ${length}`;
  const bar = el("div", { class: "layout-track", role: "img", "aria-label": words, title: words }, span);
  const button = showLayer
    ? el("button", { type: "button", class: "token", "data-layer": layer.layer, title: `show the attention maps of layer ${layer.layer}` }, "maps")
    : null;
  button?.addEventListener("click", () => showLayer?.(layer.layer));
  const row = el("tr", { "data-testid": "layout-row", "data-window": layer.window ?? "global" },
    el("th", { scope: "row" }, String(layer.layer)),
    el("td", {}, layer.position),
    el("td", {}, el("div", { class: "layout-bar" }, bar, el("span", { class: "layout-count" }, `${count} of ${length}`))),
    el("td", { "data-testid": "layout-window" }, windowLabel(layer.window)),
    el("td", { class: "num" }, layer.rope_theta === null ? "—" : String(layer.rope_theta)),
    el("td", {}, layer.log_scale ? "yes" : "no"),
    el("td", {}, layer.qk_norm ? "yes" : "no"),
  );
  append(row, el("td", {}, button));
  return row;
}
