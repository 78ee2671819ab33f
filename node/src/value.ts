// A job's result as a value (protocol 33): what a worker writes for what its handler returned,
// and the one reading rule every reader follows (docs/protocol.md §3; Rust's job::value).
//
// Written: a string as it is, the record's `output` only (as before 33). Anything else as its
// MessagePack bytes, the record's `value` (msgpack.ts: a Date stays a Date, a Buffer a Buffer,
// a Map a Map, a BigInt a BigInt, undefined is nil), beside the `output` text older readers
// show: its JSON (a Date as ISO 8601, bytes as base64, a BigInt's exact digits, null and
// undefined as `null`).
// Read: `decode(value)` when the record has `value`, else the `output` text as a string (null
// when there is none): a foreign or older worker's text reads back as the text it wrote.
import { InvalidInput } from "./errors.js";
import { decode, encode } from "./msgpack.js";

/** What a worker sends for a handler's return: the `output` text and, for anything but a
 * string, the `value` bytes. Throws `InvalidInput` naming what MessagePack cannot carry (a
 * function, a symbol, a Set, a cycle …, and where it is). */
export function resultOf(value: unknown): { text: string; bytes: Buffer | null } {
  if (typeof value === "string") return { text: value, bytes: null };
  // a handler that returns nothing (most do): MessagePack's nil, one shared answer
  if (value === undefined || value === null) return NOTHING;
  const bytes = encode(value, "the value the handler returned");
  return { text: jsonText(value), bytes };
}

/** What `undefined` and `null` are written as (never changed: its bytes are only read). */
const NOTHING: { readonly text: string; readonly bytes: Buffer } = Object.freeze({ text: "null", bytes: Buffer.from([0xc0]) });

/** The reading rule: the record's `value` decoded when it has one, else its `output` text
 * (null when it has none). Bytes that are not MessagePack (no worker of ours writes such) read
 * as the text beside them. */
export function readResult(value: Buffer | null | undefined, text: string | null | undefined): unknown {
  if (value && value.length > 0) {
    try {
      return decode(value);
    } catch {
      return text ?? null;
    }
  }
  return text ?? null;
}

/** The JSON text of a value msgpack.ts carries (checked by `encode` first): what readers older
 * than protocol 33 get in `output`. */
export function jsonText(v: unknown): string {
  if (v === null || v === undefined) return "null";
  switch (typeof v) {
    case "boolean":
      return v ? "true" : "false";
    case "number":
      return Number.isFinite(v) ? JSON.stringify(v) : "null";
    case "bigint":
      return v.toString();
    case "string":
      return JSON.stringify(v);
    case "object":
      break;
    default:
      throw new InvalidInput(`a ${typeof v} has no JSON text`);
  }
  if (v instanceof Date) return JSON.stringify(v.toISOString());
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
    const b = v instanceof ArrayBuffer ? Buffer.from(v) : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
    return JSON.stringify(b.toString("base64"));
  }
  if (Array.isArray(v)) return `[${v.map((x) => jsonText(x)).join(",")}]`;
  if (v instanceof Map) {
    const parts: string[] = [];
    for (const [k, x] of v) parts.push(`${JSON.stringify(typeof k === "string" ? k : jsonText(k))}:${jsonText(x)}`);
    return `{${parts.join(",")}}`;
  }
  const toJSON = (v as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") return jsonText(toJSON.call(v));
  const parts: string[] = [];
  for (const [k, x] of Object.entries(v)) if (x !== undefined) parts.push(`${JSON.stringify(k)}:${jsonText(x)}`);
  return `{${parts.join(",")}}`;
}

/** Record fields whose values are bytes (read as Buffers, never as UTF-8 text). */
export function binaryField(name: string): boolean {
  return name === "payload" || name === "value" || name.startsWith("value:");
}
