// Playgrounds 6 and 7: the learned relative biases, T5's distance buckets and FIRE's interpolated distance.
import { fireInterpolated, t5Buckets } from "../math";
import { colorBar, heatmap, type Scale } from "../plot";
import { el, fmt, section, select, slider } from "../ui";

export function t5Playground(): HTMLElement {
  const { root, controls, body } = section("t5", "6 · T5: one learned number per distance bucket", [
    "T5's relative bias also adds a number to each attention score, like ALiBi, but the number is learned: one per head ",
    "and bucket of distance. Near keys get a bucket each; farther ones share logarithmically wider buckets, and every key ",
    "past the maximum distance shares the last one, so any length reuses buckets it has seen. The map shows which bucket ",
    "(so which learned number) each query and key use; a diagonal line is one distance. Grey cells are masked future keys.",
  ]);
  let length = 48;
  let buckets = 32;
  let maxDistance = 128;
  const map = heatmap("T5 bucket of every query and key");
  map.canvas.id = "t5-map";
  const legend = el("div");
  const render = () => {
    const scale: Scale = { kind: "sequential", min: 0, max: buckets - 1 };
    map.draw(t5Buckets(length, length, buckets, maxDistance), {
      scale, xLabel: "key j", yLabel: "query i", aspect: 1, masked: (r, c) => c > r,
      describe: (r, c, v) => (c > r ? `query ${r}, key ${c}: future, masked` : `query ${r}, key ${c}: distance ${r - c}, bucket ${v}`),
    });
    legend.replaceChildren(colorBar(scale, "bucket"));
  };
  const distance = slider("Maximum distance", 20, 256, 1, maxDistance, (v) => { maxDistance = v; render(); }, String, "t5-max-distance");
  controls.append(
    slider("Sequence length", 8, 160, 1, length, (v) => { length = v; render(); }, String, "t5-length").root,
    select("Buckets", [["8", "8"], ["16", "16"], ["32", "32 (T5's)"]], String(buckets), (v) => { buckets = Number(v); render(); }, "t5-buckets").root,
    distance.root,
  );
  body.append(legend, map.root);
  render();
  return root;
}

export function firePlayground(): HTMLElement {
  const { root, controls, body } = section("fire", "7 · FIRE: a learned function of distance over position", [
    "FIRE feeds each query and key to a small learned network, one bias per head out. Its input is not the distance itself ",
    "but log(c·(i − j) + 1) divided by log(c·max(i, L) + 1): the distance measured against how far the query sits, ",
    "so it lies between 0 and 1 at any length and a longer sequence only fills in values between ones seen in training. ",
    "Queries before position L share one scale, so short sequences are not stretched; from L on, each query's row is divided by its own position. ",
    "The model learns c and L; octlm starts them at 0.1 and 512.",
  ]);
  let length = 64;
  let c = 0.1;
  let threshold = 16;
  const map = heatmap("FIRE's interpolated distance of every query and key");
  map.canvas.id = "fire-map";
  const scale: Scale = { kind: "sequential", min: 0, max: 1 };
  const render = () => {
    map.draw(fireInterpolated(length, length, c, threshold), {
      scale, xLabel: "key j", yLabel: "query i", aspect: 1, masked: (r, col) => col > r,
      describe: (r, col, v) => (col > r ? `query ${r}, key ${col}: future, masked` : `query ${r}, key ${col}: distance ${r - col}, input ${fmt(v, 3)}`),
    });
  };
  controls.append(
    slider("Sequence length", 8, 256, 1, length, (v) => { length = v; render(); }, String, "fire-length").root,
    slider("c", 0.02, 2, 0.02, c, (v) => { c = v; render(); }, (v) => fmt(v, 2), "fire-c").root,
    slider("Threshold L", 1, 512, 1, threshold, (v) => { threshold = v; render(); }, String, "fire-threshold").root,
  );
  body.append(colorBar(scale, "input of the learned network"), map.root);
  render();
  return root;
}
