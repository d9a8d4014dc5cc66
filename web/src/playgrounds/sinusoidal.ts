// Playground 3: the sinusoidal table and the cosine similarity of every pair of positions.
import { cosineMatrix, sinusoidal, type SinusoidalLayout } from "../math";
import { colorBar, heatmap } from "../plot";
import { el, fmt, section, select, slider } from "../ui";

export function sinusoidalPlayground(): HTMLElement {
  const { root, controls, body } = section("sinusoidal", "3 · Sinusoidal positions and their similarity map", [
    "Left: the table, one row per position. Column pair i is a sine and a cosine of t / 10000^(2i/width), ",
    "so the left columns change every row and the right ones barely change. Right: the cosine similarity of every pair of positions. ",
    "The band along the diagonal has the same shape all the way down, because the similarity of two rows depends only on ",
    "their distance. A wider table makes the band narrower: more frequencies take part.",
  ]);
  let width = 64;
  let length = 64;
  let layout: SinusoidalLayout = "interleaved";
  const table = heatmap("sinusoidal position table");
  const similarity = heatmap("cosine similarity between positions");
  table.canvas.id = "sinusoidal-table";
  similarity.canvas.id = "sinusoidal-map";
  const render = () => {
    const t = sinusoidal(length, width, 0, 10000, layout);
    table.draw(t, {
      scale: { kind: "diverging", max: 1 }, xLabel: `column (${layout})`, yLabel: "position t",
      describe: (r, c, v) => `position ${r}, column ${c}: ${fmt(v, 3)}`,
    });
    similarity.draw(cosineMatrix(t), {
      scale: { kind: "diverging", max: 1 }, xLabel: "position s", yLabel: "position t", aspect: 1,
      describe: (r, c, v) => `positions ${r} and ${c} (distance ${Math.abs(r - c)}): ${fmt(v, 3)}`,
    });
  };
  controls.append(
    slider("Width (columns)", 2, 256, 1, width, (v) => { width = v; render(); }, String, "sinusoidal-width").root,
    slider("Positions (rows)", 4, 256, 1, length, (v) => { length = v; render(); }, String, "sinusoidal-length").root,
    select("Column layout", [["interleaved", "interleaved: sin, cos, sin, …"], ["concatenated", "concatenated: all sines, then all cosines"]], layout, (v) => { layout = v as SinusoidalLayout; render(); }, "sinusoidal-layout").root,
  );
  body.append(
    el("div", { class: "pair" },
      el("div", {}, el("h3", {}, "The table"), table.root, colorBar({ kind: "diverging", max: 1 }, "value")),
      el("div", {}, el("h3", {}, "Cosine similarity"), similarity.root, colorBar({ kind: "diverging", max: 1 }, "similarity")),
    ),
  );
  render();
  return root;
}
