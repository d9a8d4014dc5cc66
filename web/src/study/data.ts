// A length study as `octlm serve --study` hands it to the page (window.OCTLM_STUDY, set by
// run-data.js; written by octlm.export.study_view.study_view), and the tables the page draws from it.
import type { MapSet } from "../attention/data";

export interface StudyRecord {
  record: "study";
  train_length: number;
  lengths: number[];
  targets: number;
  equal_steps: { steps: number; seconds_per_step: number; timed_scheme: string; time_budget: number } | null;
  options: Record<string, unknown>;
}

export interface TrainRecord {
  record: "train";
  position: string;
  seed: number;
  steps?: number;
  train_seconds?: number;
  val_bpb?: number;
}

export interface EvalRecord {
  record: "eval";
  label: string;
  position: string;
  rope_scaling: string | null;
  rope_factor: number | null;
  multiplier: number;
  eval_length: number;
  seed: number;
  status: string;
  /** Non-overlapping windows; null past a learned table. */
  bpb: number | null;
  /** Sliding windows; null where not scored, absent in a study made before the reading existed. */
  sliding_bpb?: number | null;
  /** Tokens the sliding windows advance by. */
  eval_stride?: number | null;
  extended_to?: number;
}

export interface CurveRecord {
  record: "curve";
  label: string;
  seed: number;
  step: number;
  eval_length: number;
  bpb: number;
}

/** The study's own attention statistics of one model at one length, over its evaluation windows. */
export interface AttentionRecord {
  record: "attention";
  label: string;
  position?: string;
  seed: number | null;
  eval_length: number;
  windows?: number;
  query_positions?: number[];
  entropy?: number[][][];
  mean_entropy?: number[][];
  mean_distance?: number[][];
  sink_mass?: number[][];
  max_logit?: number[][];
}

export interface StudyModelAttention {
  label: string;
  position: string;
  seed: number;
  lengths: MapSet[];
}

export interface StudyData {
  format: number;
  kind: "study";
  name: string;
  study: StudyRecord;
  train: TrainRecord[];
  eval: EvalRecord[];
  curve: CurveRecord[];
  attention_records: AttentionRecord[];
  /** What this (older) study lacks, one sentence each. */
  missing: string[];
  attention: { format: number; seed: number | null; side: number; tokens: string[]; models: StudyModelAttention[] };
}

declare global {
  interface Window {
    OCTLM_STUDY?: StudyData;
  }
}

/** The two ways the study reads the validation text at each length. */
export type Reading = "bpb" | "sliding_bpb";

export const READINGS: Array<[Reading, string]> = [["bpb", "non-overlapping windows"], ["sliding_bpb", "sliding windows"]];

/** The three kinds of model a study scores: trained at T, RoPE scaled without training, fine-tuned at M × T. */
export type Group = "base" | "scaled" | "extended";

export function groupOf(r: Pick<EvalRecord, "label" | "rope_scaling" | "extended_to">): Group {
  if (r.extended_to !== undefined || r.label.includes("@")) return "extended";
  return r.rope_scaling ? "scaled" : "base";
}

/** Whether any eval record carries the sliding reading (a study made before it has none). */
export function hasSliding(evals: EvalRecord[]): boolean {
  return evals.some((r) => "sliding_bpb" in r);
}

/** A cell of the table: the mean over seeds (sd with two or more), or why there is no number. */
export type Cell = { mean: number; sd: number | null; n: number } | { missing: "n/a" | "not scored" };

/** Mean and sample standard deviation (n - 1), as the study's own tables (octlm.studies.shared.core.mean_std). */
export function meanSd(values: number[]): { mean: number; sd: number | null; n: number } {
  const n = values.length;
  const mean = values.reduce((a, b) => a + b, 0) / n;
  const sd = n > 1 ? Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1)) : null;
  return { mean, sd, n };
}

export interface Table {
  labels: string[];
  lengths: number[];
  cells: Cell[][];
}

/**
 * Bits per byte of each label of `group` at each length under `reading`, averaged over seeds. A
 * record whose status is not "ok" (a learned table past T) is "n/a"; an ok record without the
 * reading's number is "not scored".
 */
export function bpbTable(evals: EvalRecord[], group: Group, reading: Reading, lengths: number[]): Table {
  const rows = evals.filter((r) => groupOf(r) === group);
  const labels = [...new Set(rows.map((r) => r.label))];
  const cells = labels.map((label) => lengths.map((length): Cell => {
    const found = rows.filter((r) => r.label === label && r.eval_length === length);
    const values = found.map((r) => r[reading]).filter((v): v is number => typeof v === "number" && Number.isFinite(v));
    if (values.length) return meanSd(values);
    return { missing: found.length && found.every((r) => r.status !== "ok") ? "n/a" : "not scored" };
  }));
  return { labels, lengths, cells };
}

/** The groups present in a study, in table order. */
export function groupsIn(evals: EvalRecord[]): Group[] {
  const present = new Set(evals.map(groupOf));
  return (["base", "scaled", "extended"] as Group[]).filter((g) => present.has(g));
}

/** Each fine-tune's bits per byte against its fine-tuning step (mean over seeds), in the records' order. */
export function curveSeries(curves: CurveRecord[]): Array<{ label: string; length: number; points: Array<[number, number]> }> {
  const labels = [...new Set(curves.map((c) => c.label))];
  return labels.map((label) => {
    const mine = curves.filter((c) => c.label === label);
    const steps = [...new Set(mine.map((c) => c.step))].sort((a, b) => a - b);
    return { label, length: mine[0].eval_length, points: steps.map((s) => [s, meanSd(mine.filter((c) => c.step === s).map((c) => c.bpb)).mean] as [number, number]) };
  });
}

/** The study's attention record of `label` at `length` for `seed`, if it wrote one. */
export function attentionRecordFor(records: AttentionRecord[], label: string, length: number, seed: number | null): AttentionRecord | undefined {
  // A record without a seed (null) belongs to every seed's view.
  return records.find((r) => r.label === label && r.eval_length === length && (seed === null || r.seed === null || r.seed === seed));
}
