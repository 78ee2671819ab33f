// The RESP writer (resp.ts) that fetch, complete and every FCALL go through: its bytes are
// ioredis's own for the same arguments (ASCII, UTF-8 whose byte length has more digits than its
// length, long text, numbers, bytes, empty ones).
import assert from "node:assert/strict";
import test from "node:test";

import { Command } from "ioredis";

import { Resp } from "../dist/esm/resp.js";

function ioredisBytes(args) {
  const c = new Command(args[0], args.slice(1), { replyEncoding: null });
  const w = c.toWritable();
  return Buffer.isBuffer(w) ? w : Buffer.from(w);
}

test("a command written by Resp is the bytes ioredis writes for it", () => {
  const cases = [
    ["FCALL", "hero_v34_fetch", 4, "a", "", "b"],
    ["FCALL", "é".repeat(9), "€".repeat(40), "x".repeat(200), "ü".repeat(3000), "z".repeat(70) + "é"],
    ["FCALL", 0, 9, 10, 99, 100, 12345, 1795888287117, 1.5, -3, Buffer.from([0xc0]), Buffer.alloc(0), Buffer.alloc(5000, 7)],
    ["FCALL", ...Array.from({ length: 1500 }, (_, i) => (i % 3 === 0 ? i : i % 3 === 1 ? `k:${i}` : Buffer.from(`v${i}`)))],
  ];
  for (const args of cases) {
    const w = new Resp();
    for (const a of args) w.arg(a);
    assert.deepEqual(w.done(), ioredisBytes(args));
  }
  // a key of a prefix and an id, written as one
  const w = new Resp().str("GET").str2("hero:job:", "abc").str2("é:", "x".repeat(70)).str2("p:", "ü");
  assert.deepEqual(w.done(), ioredisBytes(["GET", "hero:job:abc", "é:" + "x".repeat(70), "p:ü"]));
});
