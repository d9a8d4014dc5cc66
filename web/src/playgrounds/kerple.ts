// Playground 9: KERPLE's logarithmic penalty, beside ALiBi's straight one.
import { kerpleBias } from "../math";
import { colorBar, heatmap, lineChart, type Scale } from "../plot";
import { el, fmt, section, slider } from "../ui";

export function kerplePlayground(): HTMLElement {
  const { root, controls, body } = section("kerple", "9 · KERPLE: a learned logarithmic penalty", [
    "KERPLE (Chi et al. 2022) also subtracts a penalty that grows with distance, like ALiBi, but along a logarithm: ",
    "−r₁ · log(1 + r₂ · (i − j)), with r₁ and r₂ learned for every layer and head. Near keys are told apart sharply; far ones ",
    "differ little, so a longer sequence adds keys whose penalties are close to ones seen in training. ",
    "r₂ sets where the curve bends, r₁ how deep it goes. Grey cells are future keys, which the causal mask hides.",
  ]);
  let length = 32;
  let r1 = 1;
  let r2 = 0.5;
  const map = heatmap("KERPLE bias of every query and key");
  map.canvas.id = "kerple-map";
  const legend = el("div");
  const curve = el("div", { "data-testid": "kerple-curve" });
  const render = () => {
    const bias = kerpleBias(r1, r2, length, length);
    const deepest = Math.min(-1e-9, bias.data[(length - 1) * length]);
    const scale: Scale = { kind: "sequential", min: deepest, max: 0, reverse: true };
    map.draw(bias, {
      scale, xLabel: "key j", yLabel: "query i", aspect: 1, masked: (r, c) => c > r,
      describe: (r, c, v) => (c > r ? `query ${r}, key ${c}: future, masked` : `query ${r}, key ${c}: distance ${r - c}, bias ${fmt(v, 3)}`),
    });
    legend.replaceChildren(colorBar(scale, "bias added to the score"));
    const distances = Array.from({ length }, (_, d) => d);
    curve.replaceChildren(lineChart([
      { name: "KERPLE", color: "#1f77b4", points: distances.map((d) => [d, -r1 * Math.log1p(r2 * d)] as [number, number]) },
      { name: `ALiBi, slope ${fmt(r1 * r2, 3)} (the same start)`, color: "#ff7f0e", dash: "5 4", points: distances.map((d) => [d, -r1 * r2 * d] as [number, number]) },
    ], { title: "KERPLE's bias against distance, beside ALiBi's", xLabel: "distance i − j (tokens)", yLabel: "bias" }));
  };
  controls.append(
    slider("Sequence length", 4, 128, 1, length, (v) => { length = v; render(); }, String, "kerple-length").root,
    slider("r₁", 0.05, 4, 0.05, r1, (v) => { r1 = v; render(); }, (v) => fmt(v, 2), "kerple-r1").root,
    slider("r₂", 0.01, 2, 0.01, r2, (v) => { r2 = v; render(); }, (v) => fmt(v, 2), "kerple-r2").root,
  );
  body.append(legend, map.root, curve);
  render();
  return root;
}
