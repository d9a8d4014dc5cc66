// "Your study": a length study's bits per byte against length under both readings, the extension
// stage's fine-tuning curves and every model's attention at every length.
import { attentionExplorer } from "../attention/view";
import { lineChart, type Series } from "../plot";
import { el, fmt, radios, section } from "../ui";
import {
  attentionRecordFor, bpbTable, curveSeries, groupsIn, hasSliding, READINGS, type AttentionRecord, type Cell, type Group, type Reading, type StudyData, type Table,
} from "./data";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
const GROUPS: Record<Group, string> = { base: "trained at T", scaled: "RoPE scaled, no training", extended: "fine-tuned at M × T" };

export function studySection(study: StudyData): HTMLElement {
  const s = study.study;
  const { root, body } = section("study", `Your study: ${study.name}`, [
    "A length study (", el("code", {}, "octlm length"), ") trains one model per position scheme on the same text, for the same steps, at length T, ",
    "then reads the validation text at longer and longer lengths. Which scheme keeps working past the length it trained on, and what its attention does there.",
  ]);
  const seeds = [...new Set(study.train.map((r) => r.seed))];
  const steps = study.train.find((r) => !r.position.includes("@"))?.steps;
  body.append(
    el("dl", { class: "facts" },
      ...fact("training length T", `${s.train_length} tokens`),
      ...fact("evaluation lengths", s.lengths.join(", ")),
      ...fact("models", String(new Set(study.eval.map((r) => r.label)).size)),
      ...fact("seeds", seeds.join(", ") || "?"),
      ...fact("steps per model", steps === undefined ? "?" : String(steps)),
      ...fact("validation targets", s.targets.toLocaleString("en")),
    ),
  );
  if (study.missing.length) {
    body.append(el("div", { class: "missing", "data-testid": "study-missing" },
      el("p", {}, el("strong", {}, "This study was made by an older octlm; the page shows what it has. Missing:")),
      ...study.missing.map((m) => el("p", {}, m))));
  }
  body.append(bpbPanel(study), curvePanel(study), attentionPanel(study));
  return root;
}

function fact(name: string, value: string): HTMLElement[] {
  return [el("dt", {}, name), el("dd", {}, value)];
}

function cellText(c: Cell): string {
  if ("missing" in c) return c.missing;
  return c.sd === null ? fmt(c.mean, 4) : `${fmt(c.mean, 4)} ± ${fmt(c.sd, 4)}`;
}

function tableOf(t: Table): HTMLElement {
  return el("div", { class: "grid-wrap" }, el("table", { class: "values", id: "study-bpb-table" },
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "model"), ...t.lengths.map((l) => el("th", { scope: "col" }, String(l))))),
    el("tbody", {}, ...t.labels.map((label, i) => el("tr", { "data-label": label },
      el("th", { scope: "row" }, label), ...t.cells[i].map((c) => el("td", {}, cellText(c)))))),
  ));
}

function bpbPanel(study: StudyData): HTMLElement {
  const lengths = study.study.lengths;
  const T = study.study.train_length;
  const sliding = hasSliding(study.eval);
  const groups = groupsIn(study.eval);
  let reading: Reading = "bpb";
  let group: Group = groups[0] ?? "base";
  const out = el("div", { "data-testid": "study-bpb" });
  const draw = () => {
    const table = bpbTable(study.eval, group, reading, lengths);
    const series: Series[] = table.labels.map((label, i) => ({
      name: label, color: COLORS[i % COLORS.length], dots: true,
      points: table.cells[i].flatMap((c, j) => ("missing" in c ? [] : [[Math.log2(lengths[j]), c.mean] as [number, number]])),
    }));
    out.replaceChildren(
      lineChart(series, {
        title: `bits per byte against length, ${READINGS.find(([r]) => r === reading)![1]}`, xLabel: "length (tokens, log scale)", yLabel: "bits per byte",
        xTicks: lengths.map((l) => [Math.log2(l), String(l)]), markers: [{ x: Math.log2(T), label: "T" }], legendBelow: true,
        pointTitle: (s, x, y) => `${s.name} at ${Math.round(2 ** x)} tokens: ${fmt(y, 4)} bits per byte`,
        empty: "No model of this kind has a number under this reading.",
      }),
      tableOf(table),
    );
    out.dataset.reading = reading;
    out.dataset.group = group;
  };
  const readingChoice = radios("Reading", "study-reading", READINGS.map(([r, text]) => [r, text]), reading, (v) => {
    reading = v as Reading;
    draw();
  });
  if (!sliding) readingChoice.inputs[1].disabled = true;
  const groupChoice = radios("Models", "study-group", groups.map((g) => [g, GROUPS[g]]), group, (v) => {
    group = v as Group;
    draw();
  });
  draw();
  const stride = study.eval.find((r) => typeof r.eval_stride === "number")?.eval_stride;
  return el("div", { class: "panel" },
    el("h3", {}, "Bits per byte against length"),
    el("p", { class: "caption" },
      "Lower is better. Non-overlapping windows: each window of L tokens starts from nothing, so the first targets of every window have little context. ",
      sliding ? `Sliding windows: windows advance by a stride${stride ? ` (${stride} tokens at the first length)` : ""} and score only targets no earlier window scored, so nearly every target has a long context. ` : "",
      "n/a: a learned table has no rows past T, so there is no number (nothing is cropped or invented). Values are means over seeds (± sample standard deviation with several)."),
    el("div", { class: "controls" }, readingChoice.root, groupChoice.root),
    sliding ? null : el("p", { class: "note", "data-testid": "study-no-sliding" }, "Sliding windows: not in this study (made before octlm length scored them)."),
    out,
  );
}

function curvePanel(study: StudyData): HTMLElement {
  const curves = curveSeries(study.curve);
  const head = [el("h3", {}, "Fine-tuning at M × T"), el("p", { class: "caption" },
    "The extension stage fine-tunes a copy of each model at M × T tokens and scores it at that length after 0, N/4, N/2, 3N/4 and N steps. ",
    "Step 0 is the model before fine-tuning (a RoPE scaling, or a learned table stretched to M × T rows).")];
  if (!curves.length) {
    return el("div", { class: "panel" }, ...head, el("p", { class: "note", "data-testid": "study-no-curves" }, "This study has no extension stage (it was run with --extend-to 0)."));
  }
  const series: Series[] = curves.map((c, i) => ({ name: `${c.label} at ${c.length}`, color: COLORS[i % COLORS.length], dots: true, points: c.points }));
  return el("div", { class: "panel" }, ...head,
    el("div", { class: "narrow", id: "study-curves" }, lineChart(series, {
      title: "bits per byte against fine-tuning steps", xLabel: "fine-tuning step", yLabel: "bits per byte", legendBelow: true,
      pointTitle: (s, x, y) => `${s.name}, step ${x}: ${fmt(y, 4)} bits per byte`,
    })),
  );
}

function attentionPanel(study: StudyData): HTMLElement {
  const a = study.attention;
  const head = [el("h3", {}, "Attention at each length"), el("p", { class: "caption" },
    "Every model's attention on the first L tokens of the validation text, at every length it was scored at",
    a.seed !== null && new Set(study.train.map((r) => r.seed)).size > 1 ? ` (seed ${a.seed}, the first of the study's seeds)` : "",
    ". Maps longer than ", String(a.side), " tokens are pooled: each cell is a block of positions, its value the attention the block's queries put on the block's keys.")];
  if (!a.models.length) return el("div", { class: "panel" }, ...head, el("p", { class: "note" }, "No run folder of this study was found, so there is no attention to show."));
  return el("div", { class: "panel" }, ...head,
    attentionExplorer({
      id: "study-attention", models: a.models, tokens: a.tokens, trainLength: study.study.train_length,
      extra: (label, length, layer) => studyStatistics(attentionRecordFor(study.attention_records, label, length, a.seed), layer),
    }));
}

/** The study's own statistics of a model at a length (its attention record, over its evaluation windows), one row per head. */
function studyStatistics(r: AttentionRecord | undefined, layer: number): HTMLElement | null {
  if (!r?.mean_entropy?.[layer]) return null;
  const cell = (values: number[][] | undefined, h: number, digits: number) => el("td", {}, values?.[layer]?.[h] === undefined ? "?" : fmt(values[layer][h], digits));
  return el("div", { class: "grid-wrap", "data-testid": "study-attention-record" },
    el("table", { class: "values" },
      el("caption", {}, `The study's own statistics of layer ${layer} over its evaluation windows (its attention record):`),
      el("thead", {}, el("tr", {}, ...["head", "entropy (nats)", "distance (tokens)", "first token", "max logit"].map((t) => el("th", { scope: "col" }, t)))),
      el("tbody", {}, ...r.mean_entropy[layer].map((_, h) => el("tr", {},
        el("th", { scope: "row" }, String(h)), cell(r.mean_entropy, h, 2), cell(r.mean_distance, h, 1), cell(r.sink_mass, h, 3), cell(r.max_logit, h, 1)))),
    ));
}
