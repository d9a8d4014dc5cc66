// Playground 1: an embedding lookup is a one-hot vector times the table.
import { row, toRows, vecMat } from "../math";
import { cssColor } from "../plot";
import { clear, el, numberGrid, section, select } from "../ui";
import { WORDS, TOY_STD, colLabels, tokenTable } from "./vocab";

export function oneHotPlayground(): HTMLElement {
  const { root, controls, body } = section("onehot", "1 · An embedding is a row lookup", [
    "Pick a token. Its one-hot vector has a single 1, at the token's ID. Multiplying it by the table adds up ",
    "1 × that row and 0 × every other row, so the product is exactly the highlighted row. ",
    "That is why nn.Embedding simply indexes the row instead of multiplying by all the zeros.",
  ]);
  const scale = { kind: "diverging" as const, max: 2.5 * TOY_STD };
  const render = (id: number) => {
    clear(body);
    const onehot = WORDS.map((_, i) => (i === id ? 1 : 0));
    const product = vecMat(onehot, tokenTable);
    const same = Array.from(product).every((v, c) => v === row(tokenTable, id)[c]);
    body.append(
      el("div", { class: "stack" },
        numberGrid([onehot], { rowLabels: ["one-hot"], colLabels: WORDS.map((w, i) => `${i}:${w}`), color: (v) => (v ? "#ffd54f" : "#fafafa"), digits: 0, caption: `one-hot vector of “${WORDS[id]}” (ID ${id}), length ${WORDS.length}` }),
        numberGrid(toRows(tokenTable), { rowLabels: WORDS.map((w, i) => `${i} ${w}`), colLabels: colLabels(tokenTable.cols), color: (v) => cssColor(v, scale), highlightRow: id, caption: `token table E [${WORDS.length} × ${tokenTable.cols}]` }),
        numberGrid([product], { rowLabels: ["one-hot · E"], colLabels: colLabels(tokenTable.cols), color: (v) => cssColor(v, scale), caption: "the product" }),
      ),
      el("p", { class: "verdict", "data-testid": "onehot-verdict" }, same ? `one-hot · E equals row ${id} of E exactly.` : "one-hot · E differs from the row (this should never happen)."),
    );
  };
  controls.append(select("Token", WORDS.map((w, i) => [String(i), `${i}: ${w}`]), "1", (v) => render(Number(v)), "onehot-token").root);
  render(1);
  return root;
}
