// Finding the token a person types, and unpacking the run's float32 tables.
import { describe, expect, it } from "vitest";
import { lookupToken, showToken, unpack } from "../src/run/data";

const tokens = ["<|endoftext|>", "the", " the", " thee", " then", "\n", "\u0002", "\\xef", " king"];

describe("lookupToken", () => {
  it("takes #ID", () => expect(lookupToken("#4", tokens)).toEqual({ id: 4, how: "by ID" }));
  it("refuses an ID outside the vocabulary", () => expect(lookupToken("#99", tokens).id).toBeNull());
  it("prefers the text as typed", () => expect(lookupToken("the", tokens)).toEqual({ id: 1, how: "as typed" }));
  it("accepts the shown space and a typed space alike", () => {
    expect(lookupToken("␣the", tokens).id).toBe(2);
    expect(lookupToken(" the", tokens).id).toBe(2);
  });
  it("adds the leading space when the bare word is not a token", () =>
    expect(lookupToken("king", tokens)).toEqual({ id: 8, how: "with its leading space" }));
  it("finds newlines and escaped bytes by their shown form", () => {
    expect(lookupToken("↵", tokens).id).toBe(5);
    expect(lookupToken("\\x02", tokens).id).toBe(6);
    expect(lookupToken("\\xef", tokens).id).toBe(7);
  });
  it("suggests tokens that start with a longer text", () => {
    const found = lookupToken("th", tokens.slice(2));
    expect(found.id).toBeNull();
    if (found.id === null) expect(found.suggestions.map((i) => tokens.slice(2)[i])).toEqual([" the", " thee", " then"]);
  });
});

describe("showToken", () => {
  it("makes invisible characters visible", () => expect(showToken(" a\n\t\u0000")).toBe("␣a↵⇥\\x00"));
});

describe("unpack", () => {
  it("reads little-endian float32 rows", () => {
    const values = [1.5, -2.25, 0, 3.0e-8, 1e6, -0.125];
    const bytes = new Uint8Array(new Float32Array(values).buffer);
    const b64 = btoa(String.fromCharCode(...bytes));
    const m = unpack({ rows: 2, cols: 3, float32_base64: b64 });
    expect([m.rows, m.cols]).toEqual([2, 3]);
    expect(Array.from(m.data)).toEqual(values.map((v) => Math.fround(v)));
  });
  it("refuses a wrong size", () => expect(() => unpack({ rows: 2, cols: 2, float32_base64: btoa("abc") })).toThrow(/expected 4/));
});
