// Faithful payloads against a real redis-server: a Date, a Buffer, a typed array, a Map (with
// keys that are not strings), a BigInt beyond 2^53 and nested values reach a Node handler as the
// same types, and a Python handler (hero-py's `job.data`) as datetime, bytes, dict and int; what
// Python sends comes back to Node as Date, Buffer, Map and BigInt. MessagePack's bytes are
// checked against the format (the timestamp extension -1, bin, uint64).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";

import { Client, Worker, decodePayload, encodePayload } from "../dist/esm/index.js";
import { redisServer, ROOT } from "./helpers.mjs";

const PYTHON = join(ROOT, "target", "interop-venv", "bin", "python");

const sample = () => ({
  at: new Date("2026-11-26T10:20:30.456Z"),
  before1970: new Date("1969-07-20T20:17:40Z"),
  bytes: Buffer.from("hello"),
  floats: new Float32Array([1.5, -2]),
  ids: new Map([[1, "one"], [2, "two"]]),
  big: 2n ** 60n + 7n,
  nested: { list: [1, "two", null, true, 2.5, -40, 2 ** 40] },
});

test("MessagePack's own types: the timestamp extension, bin and 64-bit integers", () => {
  const ts = encodePayload(new Date("2026-01-01T00:00:00.5Z"));
  assert.deepEqual([ts[0], ts[1]], [0xd7, 0xff], "timestamp 64 (ext 8, type -1)");
  assert.deepEqual([...encodePayload(Buffer.from([1, 2])).subarray(0, 2)], [0xc4, 2], "bin 8");
  assert.equal(encodePayload(2n ** 60n)[0], 0xcf, "uint 64");
  assert.equal(encodePayload(2 ** 40)[0], 0xcf, "an integer number stays an integer");
  const back = decodePayload(encodePayload(sample()));
  assert.ok(back.at instanceof Date && back.at.toISOString() === "2026-11-26T10:20:30.456Z");
  assert.equal(back.before1970.toISOString(), "1969-07-20T20:17:40.000Z");
  assert.ok(Buffer.isBuffer(back.bytes) && back.bytes.toString() === "hello");
  assert.deepEqual(new Float32Array(back.floats.buffer.slice(back.floats.byteOffset, back.floats.byteOffset + 8)), new Float32Array([1.5, -2]));
  assert.ok(back.ids instanceof Map && back.ids.get(2) === "two", "a map with keys that are not strings comes back a Map");
  assert.equal(back.big, 2n ** 60n + 7n);
  assert.deepEqual(back.nested, { list: [1, "two", null, true, 2.5, -40, 2 ** 40] });
});

test("a payload reaches a Node handler and a Python handler as its own types, and Python's comes back", async (t) => {
  const redis = await redisServer();
  const client = await Client.connect(redis.url);
  t.after(async () => {
    await client.close();
    redis.stop();
  });
  const seen = [];
  const worker = new Worker("types", async (job) => {
    seen.push(job.data);
    return "ok";
  }, { url: redis.url });
  await worker.waitUntilReady();
  await client.run({ type: "types", payload: sample() }, 20_000);
  await worker.close();
  const d = seen[0];
  assert.ok(d.at instanceof Date && d.at.getTime() === sample().at.getTime());
  assert.ok(Buffer.isBuffer(d.bytes));
  assert.ok(d.ids instanceof Map);
  assert.equal(typeof d.big, "bigint");

  // the same payload read by hero-py, and one Python writes read here
  const id = await client.submit({ type: "py-reads", payload: sample() });
  const script = `
import datetime, json, sys
import hero
c = hero.Client(sys.argv[1])
d = c.get(sys.argv[2]).data
out = {
  "at": d["at"].isoformat(), "aware": d["at"].tzinfo is not None,
  "bytes": [type(d["bytes"]).__name__, d["bytes"].decode()],
  "ids": {str(k): v for k, v in d["ids"].items()}, "big": str(d["big"]), "big_is_int": type(d["big"]) is int,
  "nested": d["nested"],
}
back = c.submit("x", "py-wrote", id="from-python", payload=hero.pack({
  "when": datetime.datetime(2026, 11, 26, 10, 0, tzinfo=datetime.timezone.utc),
  "raw": b"\\x00\\x01", "by_id": {7: "seven"}, "huge": 2 ** 63 + 5, "n": 2 ** 40,
}))
print(json.dumps(out))
`;
  const out = JSON.parse(execFileSync(PYTHON, ["-c", script, redis.url, id], { encoding: "utf8", timeout: 60_000 }));
  assert.deepEqual(out, {
    at: "2026-11-26T10:20:30.456000+00:00",
    aware: true,
    bytes: ["bytes", "hello"],
    ids: { 1: "one", 2: "two" },
    big: String(2n ** 60n + 7n),
    big_is_int: true,
    nested: { list: [1, "two", null, true, 2.5, -40, 2 ** 40] },
  });
  const fromPython = decodePayload((await client.get("from-python")).payload);
  assert.ok(fromPython.when instanceof Date && fromPython.when.toISOString() === "2026-11-26T10:00:00.000Z");
  assert.ok(Buffer.isBuffer(fromPython.raw) && fromPython.raw.equals(Buffer.from([0, 1])));
  assert.ok(fromPython.by_id instanceof Map && fromPython.by_id.get(7) === "seven");
  assert.equal(fromPython.huge, 2n ** 63n + 5n);
  assert.equal(fromPython.n, 2 ** 40, "an integer within 2^53 is a number");
});
