// Playground 2: token row plus position row, for six tokens.
import { gaussianMatrix, matrix, row, sinusoidal, type Matrix } from "../math";
import { cssColor } from "../plot";
import { clear, el, fmt, numberGrid, radios, section, select } from "../ui";
import { TOY_STD, TOY_WIDTH, WORDS, colLabels, tokenTable } from "./vocab";

const LENGTH = 6;
const learnedRows = gaussianMatrix(LENGTH, TOY_WIDTH, TOY_STD, 77);
const sinusoidalRows = sinusoidal(LENGTH, TOY_WIDTH);

export function sumPlayground(): HTMLElement {
  const { root, controls, body } = section("sum", "2 · Token row plus position row", [
    "Six tokens are looked up in the token table, and the row for each position is added. ",
    "The same token at two positions gets the same token row, so the two sums differ only by the position rows; ",
    "the box under the tables shows that difference. Switch between learned rows (random, as at initialisation) and ",
    "the fixed sinusoidal rows: only the middle table changes, the token table is untouched.",
  ]);
  const ids = [0, 1, 2, 3, 0, 4]; // the cat sat on the mat
  let kind = "learned";
  const scale = { kind: "diverging" as const, max: 2 };
  const render = () => {
    const positions = kind === "learned" ? learnedRows : sinusoidalRows;
    const tokens: Matrix = matrix(LENGTH, TOY_WIDTH);
    ids.forEach((id, t) => tokens.data.set(row(tokenTable, id), t * TOY_WIDTH));
    const sum: Matrix = matrix(LENGTH, TOY_WIDTH);
    for (let i = 0; i < sum.data.length; i++) sum.data[i] = tokens.data[i] + positions.data[i];
    const labels = ids.map((id, t) => `${t}: ${WORDS[id]}`);
    const grid = (m: Matrix, caption: string, testid: string) => {
      const g = numberGrid(Array.from({ length: LENGTH }, (_, t) => row(m, t)), { rowLabels: labels, colLabels: colLabels(TOY_WIDTH), color: (v) => cssColor(v, scale), caption });
      g.dataset.testid = testid;
      return g;
    };
    clear(body);
    body.append(
      el("div", { class: "equation" },
        grid(tokens, "token rows", "sum-tokens"),
        el("span", { class: "op", "aria-hidden": "true" }, "+"),
        grid(positions, kind === "learned" ? "learned position rows" : "sinusoidal position rows", "sum-positions"),
        el("span", { class: "op", "aria-hidden": "true" }, "="),
        grid(sum, "input to the first block", "sum-result"),
      ),
      comparison(ids, sum, positions),
    );
  };
  const selects = el("div", { class: "token-selects" });
  ids.forEach((id, t) => {
    selects.append(select(`Position ${t}`, WORDS.map((w, i) => [String(i), `${i}: ${w}`]), String(id), (v) => {
      ids[t] = Number(v);
      render();
    }, `sum-token-${t}`).root);
  });
  controls.append(
    selects,
    radios("Position rows", "sum-kind", [["learned", "learned (random)"], ["sinusoidal", "sinusoidal"]], kind, (v) => {
      kind = v;
      render();
    }).root,
  );
  render();
  return root;
}

function comparison(ids: number[], sum: Matrix, positions: Matrix): HTMLElement {
  let pair: [number, number] | null = null;
  for (let a = 0; a < ids.length && !pair; a++) for (let b = a + 1; b < ids.length; b++) if (ids[a] === ids[b]) { pair = [a, b]; break; }
  const box = el("div", { class: "verdict", "data-testid": "sum-compare" });
  if (!pair) {
    box.append("Choose the same token at two positions to compare their sums.");
    return box;
  }
  const [a, b] = pair;
  const sumDiff = Array.from(row(sum, b), (v, c) => v - row(sum, a)[c]);
  const posDiff = Array.from(row(positions, b), (v, c) => v - row(positions, a)[c]);
  const gap = Math.max(...sumDiff.map((v, c) => Math.abs(v - posDiff[c])));
  const scale = { kind: "diverging" as const, max: 2 };
  box.append(
    el("p", {}, `“${WORDS[ids[a]]}” sits at positions ${a} and ${b}. Its token rows are identical, so the sums differ by exactly the position rows:`),
    numberGrid([sumDiff, posDiff], { rowLabels: [`sum ${b} − sum ${a}`, `pos ${b} − pos ${a}`], colLabels: colLabels(TOY_WIDTH), color: (v) => cssColor(v, scale) }),
    el("p", {}, `largest gap between the two rows: ${fmt(gap, 6)}`),
  );
  return box;
}
