// Which rotation angles RoPE's training positions reach, channel pair by channel pair, and which angles positions
// past the training length T reach that training never did: the page's account of why plain RoPE breaks past T.
// Python computes the same cells another way (octlm.export.parity, "rope_reach"); web/test/parity.test.ts holds
// this function to it.
import { ropeInverseFrequencies } from "./math";

/** A position of one pair: a training position (p < T). */
export const TRAINED = 0;
/** A position past T whose angle lies within half a step of an angle training saw. */
export const SEEN = 1;
/** A position past T whose angle training never came near. */
export const UNSEEN = 2;

export interface RopeReach {
  headDim: number;
  theta: number;
  trainLength: number;
  positions: number;
  /** theta_i = theta^(-2i/headDim), radians per position, one per pair. */
  invFreq: Float64Array;
  /** T theta_i / 2 pi: the turns pair i makes over the T training positions. */
  turns: number[];
  /** The first pair with T theta_i < 2 pi: it and every slower pair never complete a turn within T (headDim / 2 when
   * every pair does). */
  firstSlowPair: number;
  /** [pair][position 0 .. positions - 1]: TRAINED, SEEN or UNSEEN. */
  cells: number[][];
  /** Per pair, how many positions from T to positions - 1 sit at an angle training never saw. */
  unseen: number[];
}

/**
 * RoPE turns channel pair i of a token at position p by p theta_i. Training at length T shows each pair the angles
 * m theta_i for m < T; take each to stand for the arc within half a step (theta_i / 2) of it. Together they cover
 * [-theta_i / 2, (T - 1/2) theta_i): the whole circle when T theta_i >= 2 pi (the pair completes a turn), else an arc.
 * A position past T is SEEN when its angle, mod 2 pi, falls in that cover, UNSEEN when not: for a slow pair, every
 * position from T on until the angle wraps round to the start.
 *
 * Throws RangeError for an odd or too small headDim, theta <= 1, trainLength < 1 or positions < trainLength.
 */
export function ropeReach(headDim: number, theta: number, trainLength: number, positions = 4 * trainLength): RopeReach {
  if (!(theta > 1)) throw new RangeError(`RoPE: rope_theta must be > 1, got ${theta}`);
  if (!(Number.isInteger(trainLength) && trainLength >= 1 && Number.isInteger(positions) && positions >= trainLength)) {
    throw new RangeError(`RoPE: need whole numbers 1 <= T <= positions, got T = ${trainLength}, positions = ${positions}`);
  }
  const invFreq = ropeInverseFrequencies(headDim, theta);
  const turn = 2 * Math.PI;
  const turns = Array.from(invFreq, (w) => (trainLength * w) / turn);
  const slow = turns.findIndex((t) => t < 1);
  const cells = Array.from(invFreq, (w) => {
    const cover = trainLength * w; // the covered arc starts half a step before 0; shift every angle by that half step
    return Array.from({ length: positions }, (_, p) => {
      if (p < trainLength) return TRAINED;
      const shifted = ((p + 0.5) * w) % turn;
      return cover >= turn || shifted < cover ? SEEN : UNSEEN;
    });
  });
  return {
    headDim, theta, trainLength, positions, invFreq, turns,
    firstSlowPair: slow < 0 ? invFreq.length : slow,
    cells,
    unseen: cells.map((row) => row.filter((c) => c === UNSEEN).length),
  };
}

/** The one-line count the page shows: which pairs never complete a turn within T, and how many cells past T sit at
 * angles training never saw. */
export function slowPairsLine(r: RopeReach): string {
  const pairs = r.headDim / 2;
  const k = r.firstSlowPair;
  const unseen = r.unseen.reduce((a, b) => a + b, 0);
  const past = `${unseen} of the ${pairs * (r.positions - r.trainLength)} (pair, position) cells from T to ${r.positions - 1} sit at angles training never saw.`;
  if (k >= pairs) return `Every pair (0–${pairs - 1}) completes a turn within T = ${r.trainLength}; ${past}`;
  const which = k === pairs - 1 ? `Pair ${k} of 0–${pairs - 1} never completes` : `Pairs ${k}–${pairs - 1} of 0–${pairs - 1} never complete`;
  return `${which} a turn within T = ${r.trainLength} (T·θᵢ < 2π); ${past}`;
}
