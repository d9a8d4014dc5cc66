// The study's tables: grouping models, means over seeds, readings a study may lack, fine-tuning curves.
import { describe, expect, it } from "vitest";
import { attentionRecordFor, bpbTable, curveSeries, groupOf, groupsIn, hasSliding, meanSd, type AttentionRecord, type CurveRecord, type EvalRecord } from "../src/study/data";

function ev(label: string, length: number, seed: number, bpb: number | null, extra: Partial<EvalRecord> = {}): EvalRecord {
  const [position] = label.split(/[+@]/);
  return {
    record: "eval", label, position, rope_scaling: label.includes("+") ? label.split("+")[1].split("@")[0] : null, rope_factor: null,
    multiplier: length / 8, eval_length: length, seed, status: bpb === null ? "n/a (no rows past T)" : "ok", bpb, ...extra,
  };
}

describe("meanSd", () => {
  it("gives the mean and the sample standard deviation (n - 1)", () => {
    const s = meanSd([1, 2, 3, 4]);
    expect(s.mean).toBe(2.5);
    expect(s.sd).toBeCloseTo(Math.sqrt(5 / 3), 12);
    expect(meanSd([3.5])).toEqual({ mean: 3.5, sd: null, n: 1 });
  });
});

describe("groupOf", () => {
  it("tells models trained at T, RoPE scaled without training, and fine-tuned ones apart", () => {
    expect(groupOf(ev("rope", 8, 1, 3))).toBe("base");
    expect(groupOf(ev("rope+yarn", 8, 1, 3))).toBe("scaled");
    expect(groupOf({ ...ev("rope+yarn@4x", 8, 1, 3), extended_to: 4 })).toBe("extended");
    expect(groupOf(ev("alibi@4x", 8, 1, 3))).toBe("extended");
  });
});

describe("bpbTable", () => {
  const evals = [
    ev("learned", 8, 1, 3.0), ev("learned", 16, 1, null), ev("learned", 8, 2, 3.2), ev("learned", 16, 2, null),
    ev("rope", 8, 1, 2.9, { sliding_bpb: 2.8 }), ev("rope", 16, 1, 2.7, { sliding_bpb: null }),
    ev("rope+ntk", 8, 1, 2.9),
  ];
  it("averages over seeds and says n/a past a learned table", () => {
    const t = bpbTable(evals, "base", "bpb", [8, 16]);
    expect(t.labels).toEqual(["learned", "rope"]);
    const learned8 = t.cells[0][0];
    expect("missing" in learned8 ? null : [learned8.mean, learned8.n]).toEqual([3.1, 2]);
    expect(t.cells[0][1]).toEqual({ missing: "n/a" });
  });
  it("says 'not scored' where a record has no number under the sliding reading", () => {
    const t = bpbTable(evals, "base", "sliding_bpb", [8, 16]);
    expect(t.cells[1][0]).toEqual({ mean: 2.8, sd: null, n: 1 });
    expect(t.cells[1][1]).toEqual({ missing: "not scored" });
    expect(t.cells[0][0]).toEqual({ missing: "not scored" }); // learned's records here carry no sliding_bpb
    expect(t.cells[0][1]).toEqual({ missing: "n/a" });
  });
  it("keeps the groups apart", () => {
    expect(bpbTable(evals, "scaled", "bpb", [8]).labels).toEqual(["rope+ntk"]);
    expect(groupsIn(evals)).toEqual(["base", "scaled"]);
  });
});

describe("hasSliding", () => {
  it("is false for a study made before the sliding reading", () => {
    expect(hasSliding([ev("rope", 8, 1, 2.9)])).toBe(false);
    expect(hasSliding([ev("rope", 8, 1, 2.9), ev("rope", 16, 1, 2.9, { sliding_bpb: null })])).toBe(true);
  });
});

describe("curveSeries", () => {
  it("gives each fine-tune its mean bits per byte at each step, steps in order", () => {
    const c = (label: string, seed: number, step: number, bpb: number): CurveRecord => ({ record: "curve", label, seed, step, eval_length: 32, bpb });
    const series = curveSeries([c("rope", 1, 0, 3), c("rope", 1, 4, 2), c("rope", 2, 0, 5), c("rope", 2, 4, 4), c("alibi", 1, 0, 2.5)]);
    expect(series).toEqual([
      { label: "rope", length: 32, points: [[0, 4], [4, 3]] },
      { label: "alibi", length: 32, points: [[0, 2.5]] },
    ]);
  });
});

describe("attentionRecordFor", () => {
  it("finds the record of a label, length and seed, and nothing in a study without them", () => {
    const r = (label: string, eval_length: number, seed: number): AttentionRecord => ({ record: "attention", label, eval_length, seed });
    const records = [r("rope", 8, 1), r("rope", 16, 1), r("rope", 16, 2), r("alibi", 16, 1)];
    expect(attentionRecordFor(records, "rope", 16, 2)).toBe(records[2]);
    expect(attentionRecordFor(records, "rope", 32, 1)).toBeUndefined();
    expect(attentionRecordFor([], "rope", 16, 1)).toBeUndefined();
    const unseeded = { ...r("none", 8, 1), seed: null };
    expect(attentionRecordFor([unseeded], "none", 8, 3)).toBe(unseeded);
  });
});
