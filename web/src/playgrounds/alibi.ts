// Playground 5: ALiBi's bias matrix, one per head.
import { alibiBias, alibiSlopes } from "../math";
import { colorBar, heatmap, type Heatmap, type Scale } from "../plot";
import { clear, el, fmt, radios, section, slider } from "../ui";

export function alibiPlayground(): HTMLElement {
  const { root, controls, body } = section("alibi", "5 · ALiBi: a distance penalty per head", [
    "ALiBi adds no vectors at all. Each head subtracts slope × distance from the score of every earlier key, ",
    "so attention fades with distance. The heads get a geometric range of slopes: the first heads look mostly at ",
    "the last few tokens, the last heads see far back. Grey cells are future keys, which the causal mask hides. ",
    "With one colour scale per head, every head shows the same straight ramp: only its steepness differs.",
  ]);
  let heads = 8;
  let length = 12;
  let shared = "shared";
  const grid = el("div", { class: "multiples", "data-testid": "alibi-heads" });
  const legend = el("div");
  let maps: Heatmap[] = [];
  const render = () => {
    const slopes = alibiSlopes(heads);
    const scaleFor = (m: number): Scale => ({ kind: "sequential", min: -m * (length - 1), max: 0, reverse: true });
    maps.forEach((map) => map.dispose());
    clear(grid);
    clear(legend);
    maps = Array.from(slopes, (_, h) => heatmap(`ALiBi bias of head ${h}`));
    slopes.forEach((m, h) => {
      const map = maps[h];
      grid.append(el("div", { class: "multiple" }, el("h3", {}, `head ${h} · slope ${fmt(m, m < 0.01 ? 4 : 3)}`), map.root));
      map.draw(alibiBias(m, length, length), {
        scale: scaleFor(shared === "shared" ? slopes[0] : m), xLabel: "key j", yLabel: "query i", aspect: 1,
        masked: (r, c) => c > r,
        describe: (r, c, v) => (c > r ? `query ${r}, key ${c}: future, masked` : `query ${r}, key ${c}: ${fmt(v, 3)} (−${fmt(m, 4)} × ${r - c})`),
      });
    });
    legend.append(shared === "shared"
      ? colorBar(scaleFor(slopes[0]), "bias added to the score")
      : el("p", { class: "note" }, "Each head's colours run from 0 (light) to its own most negative bias, −slope × ", String(length - 1), " (dark)."));
  };
  controls.append(
    slider("Heads", 1, 16, 1, heads, (v) => { heads = v; render(); }, String, "alibi-heads").root,
    slider("Sequence length", 4, 32, 1, length, (v) => { length = v; render(); }, String, "alibi-length").root,
    radios("Colour scale", "alibi-scale", [["shared", "shared by all heads"], ["own", "one per head"]], shared, (v) => { shared = v; render(); }).root,
  );
  body.append(legend, grid);
  render();
  return root;
}
