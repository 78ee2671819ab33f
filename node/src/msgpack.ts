// A job's payload as MessagePack, faithfully: the record holds MessagePack (what the Rust SDK
// writes with rmp-serde, field names kept), so a payload a Node producer gives is read by a
// handler in any language, and the other way round. Each JavaScript type travels as
// MessagePack's own: a Date as the timestamp extension (-1), a Buffer, a Uint8Array or any
// typed array as `bin`, a Map as a map (any keys), a BigInt as a 64-bit integer; and comes back
// as the same type where MessagePack can tell (Date, Buffer, BigInt beyond 2^53, a map with a
// key that is not a string as a Map). What MessagePack cannot carry (a function, a symbol, a
// Set, a WeakMap, a Promise, a circular reference) throws `InvalidInput` at submit, naming where
// in the payload it is, where JSON would have made it `{}` or recursed until the stack ran out.
//
// Written here rather than taken from @msgpack/msgpack (the maintained package): its encoder
// writes a Map as `{}` (it reads `Object.keys`), keeps no path for an error, and offers either
// every 64-bit integer as a BigInt or large numbers as floats (a Python producer's 2^40 would
// come back a BigInt, or Node's 2^40 reach Python as 1099511627776.0); its internals are
// private, so it cannot be taught otherwise. ARCHITECTURE.md says the same.
import { InvalidInput } from "./errors.js";

/** A value a payload may hold. */
export type Payload =
  | null
  | undefined
  | boolean
  | number
  | bigint
  | string
  | Date
  | Uint8Array
  | ArrayBufferView
  | ArrayBuffer
  | Payload[]
  | Map<Payload, Payload>
  | { [k: string]: Payload };

/** The JSON subset of a payload (kept: the package's name for it before 1.0). */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const MAX_DEPTH = 100;
const I64_MIN = -(2n ** 63n);
const U64_MAX = 2n ** 64n - 1n;

/** MessagePack bytes of `value`; `what` names it in an error (`payload`, `data`). */
export function encode(value: unknown, what = "payload"): Buffer {
  const out: Buffer[] = [];
  write(value, out, what, [], 0);
  return Buffer.concat(out);
}

function refuse(path: string, why: string): never {
  throw new InvalidInput(`${path} ${why}`);
}

function byte(...b: number[]): Buffer {
  return Buffer.from(b);
}

function write(v: unknown, out: Buffer[], path: string, seen: object[], depth: number): void {
  if (depth > MAX_DEPTH) refuse(path, `is nested more than ${MAX_DEPTH} levels deep`);
  if (v === null || v === undefined) out.push(byte(0xc0));
  else if (v === true) out.push(byte(0xc3));
  else if (v === false) out.push(byte(0xc2));
  else if (typeof v === "number") writeNumber(v, out);
  else if (typeof v === "bigint") {
    if (v < I64_MIN || v > U64_MAX) refuse(path, `is the BigInt ${v}, beyond 64 bits: MessagePack's integers are 64-bit (send it as a string)`);
    const b = Buffer.alloc(9);
    if (v < 0n) {
      b[0] = 0xd3;
      b.writeBigInt64BE(v, 1);
    } else {
      b[0] = 0xcf;
      b.writeBigUInt64BE(v, 1);
    }
    out.push(b);
  } else if (typeof v === "string") {
    const s = Buffer.from(v, "utf8");
    out.push(header(s.length, 0xa0, 31, 0xd9, 0xda, 0xdb), s);
  } else if (typeof v === "function") refuse(path, "is a function: a payload is data (MessagePack cannot carry code)");
  else if (typeof v === "symbol") refuse(path, "is a symbol: MessagePack cannot carry one");
  else if (typeof v === "object") writeObject(v, out, path, seen, depth);
  else refuse(path, `is a ${typeof v}, which MessagePack cannot carry`);
}

function writeNumber(v: number, out: Buffer[]): void {
  if (Number.isSafeInteger(v) && !Object.is(v, -0)) {
    if (v >= 0) {
      if (v < 128) out.push(byte(v));
      else if (v < 256) out.push(byte(0xcc, v));
      else if (v < 65536) out.push(byte(0xcd, v >> 8, v & 0xff));
      else if (v < 2 ** 32) {
        const b = Buffer.alloc(5);
        b[0] = 0xce;
        b.writeUInt32BE(v, 1);
        out.push(b);
      } else {
        // an integer stays one in every language (Python's int, Rust's u64)
        const b = Buffer.alloc(9);
        b[0] = 0xcf;
        b.writeBigUInt64BE(BigInt(v), 1);
        out.push(b);
      }
    } else if (v >= -32) out.push(byte(v & 0xff));
    else if (v >= -(2 ** 31)) {
      const b = Buffer.alloc(5);
      b[0] = 0xd2;
      b.writeInt32BE(v, 1);
      out.push(b);
    } else {
      const b = Buffer.alloc(9);
      b[0] = 0xd3;
      b.writeBigInt64BE(BigInt(v), 1);
      out.push(b);
    }
    return;
  }
  const b = Buffer.alloc(9);
  b[0] = 0xcb;
  b.writeDoubleBE(v, 1);
  out.push(b);
}

function writeObject(v: object, out: Buffer[], path: string, seen: object[], depth: number): void {
  if (v instanceof Date) {
    const ms = v.getTime();
    if (Number.isNaN(ms)) refuse(path, "is an invalid Date");
    // the timestamp extension (-1): 64-bit form (30-bit ns, 34-bit s) while it fits, else 96-bit
    const sec = Math.floor(ms / 1000);
    const ns = (ms - sec * 1000) * 1_000_000;
    if (sec >= 0 && sec < 2 ** 34) {
      const b = Buffer.alloc(10);
      b[0] = 0xd7;
      b[1] = 0xff;
      b.writeBigUInt64BE((BigInt(ns) << 34n) | BigInt(sec), 2);
      out.push(b);
    } else {
      const b = Buffer.alloc(15);
      b[0] = 0xc7;
      b[1] = 12;
      b[2] = 0xff;
      b.writeUInt32BE(ns, 3);
      b.writeBigInt64BE(BigInt(sec), 7);
      out.push(b);
    }
    return;
  }
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
    const bytes = v instanceof ArrayBuffer ? Buffer.from(v) : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
    out.push(header(bytes.length, 0, -1, 0xc4, 0xc5, 0xc6), bytes);
    return;
  }
  if (seen.includes(v)) refuse(path, "refers back to an object that contains it (a circular reference): MessagePack carries trees");
  for (const [type, hint] of [
    [Set, "a Set: give an array ([...set])"],
    [WeakMap, "a WeakMap, which cannot be read whole"],
    [WeakSet, "a WeakSet, which cannot be read whole"],
    [Promise, "a Promise: await it first"],
    [RegExp, "a RegExp: give its source as a string"],
    [Error, "an Error: give its message (and stack) as strings"],
  ] as const) {
    if (v instanceof type) refuse(path, `is ${hint}`);
  }
  seen.push(v);
  if (Array.isArray(v)) {
    out.push(header(v.length, 0x90, 15, null, 0xdc, 0xdd));
    v.forEach((x, i) => write(x, out, `${path}[${i}]`, seen, depth + 1));
  } else if (v instanceof Map) {
    out.push(header(v.size, 0x80, 15, null, 0xde, 0xdf));
    let i = 0;
    for (const [k, x] of v) {
      write(k, out, `${path} key #${i}`, seen, depth + 1);
      write(x, out, `${path}.get(${typeof k === "string" ? JSON.stringify(k) : String(k)})`, seen, depth + 1);
      i++;
    }
  } else {
    const toJSON = (v as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") {
      // a class that says how it serialises (URL, a decimal, a date library's object): as JSON would
      seen.pop();
      write(toJSON.call(v), out, path, seen, depth + 1);
      return;
    }
    // a plain object, or a class instance's own fields (as JSON); undefined fields are left out
    const entries = Object.entries(v).filter(([, x]) => x !== undefined);
    out.push(header(entries.length, 0x80, 15, null, 0xde, 0xdf));
    for (const [k, x] of entries) {
      write(k, out, path, seen, depth + 1);
      write(x, out, /^[A-Za-z_$][\w$]*$/.test(k) ? `${path}.${k}` : `${path}[${JSON.stringify(k)}]`, seen, depth + 1);
    }
  }
  seen.pop();
}

function header(n: number, fix: number, fixMax: number, b8: number | null, b16: number, b32: number): Buffer {
  if (n <= fixMax) return byte(fix | n);
  if (b8 !== null && n < 256) return byte(b8, n);
  if (n < 65536) return byte(b16, n >> 8, n & 0xff);
  const b = Buffer.alloc(5);
  b[0] = b32;
  b.writeUInt32BE(n, 1);
  return b;
}

/** An extension type other than the timestamp, as read: its type and its bytes. */
export class Ext {
  constructor(
    readonly type: number,
    readonly data: Buffer,
  ) {}
}

/** The value MessagePack bytes hold: maps with string keys as objects (with any other key as a
 * Map), `bin` as a Buffer, the timestamp extension as a Date, a 64-bit integer as a number when
 * it is safe (up to 2^53) and a BigInt beyond. */
export function decode(bytes: Buffer): any {
  let at = 0;
  const need = (n: number) => {
    if (at + n > bytes.length) throw new Error("the payload's MessagePack ends early");
  };
  const u = (n: 1 | 2 | 4): number => {
    need(n);
    const v = n === 1 ? bytes.readUInt8(at) : n === 2 ? bytes.readUInt16BE(at) : bytes.readUInt32BE(at);
    at += n;
    return v;
  };
  const big = (signed: boolean): number | bigint => {
    need(8);
    const v = signed ? bytes.readBigInt64BE(at) : bytes.readBigUInt64BE(at);
    at += 8;
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  };
  const take = (n: number): Buffer => {
    need(n);
    const b = Buffer.from(bytes.subarray(at, at + n));
    at += n;
    return b;
  };
  const str = (n: number): string => take(n).toString("utf8");
  const arr = (n: number): unknown[] => Array.from({ length: n }, () => read());
  const map = (n: number): unknown => {
    const pairs: [unknown, unknown][] = [];
    for (let i = 0; i < n; i++) pairs.push([read(), read()]);
    if (pairs.every(([k]) => typeof k === "string")) return Object.fromEntries(pairs);
    return new Map(pairs);
  };
  const ext = (n: number): unknown => {
    need(1);
    const type = bytes.readInt8(at);
    at += 1;
    const data = take(n);
    if (type !== -1) return new Ext(type, data);
    if (n === 4) return new Date(data.readUInt32BE(0) * 1000);
    if (n === 8) {
      const v = data.readBigUInt64BE(0);
      return new Date(Number(v & 0x3ffffffffn) * 1000 + Math.floor(Number(v >> 34n) / 1_000_000));
    }
    if (n === 12) return new Date(Number(data.readBigInt64BE(4)) * 1000 + Math.floor(data.readUInt32BE(0) / 1_000_000));
    throw new Error(`the payload holds a timestamp of ${n} bytes (MessagePack's are 4, 8 or 12)`);
  };
  const read = (): unknown => {
    const t = u(1);
    if (t < 0x80) return t;
    if (t >= 0xe0) return t - 0x100;
    if ((t & 0xe0) === 0xa0) return str(t & 0x1f);
    if ((t & 0xf0) === 0x90) return arr(t & 0x0f);
    if ((t & 0xf0) === 0x80) return map(t & 0x0f);
    switch (t) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return take(u(1));
      case 0xc5: return take(u(2));
      case 0xc6: return take(u(4));
      case 0xc7: return ext(u(1));
      case 0xc8: return ext(u(2));
      case 0xc9: return ext(u(4));
      case 0xca: { need(4); const v = bytes.readFloatBE(at); at += 4; return v; }
      case 0xcb: { need(8); const v = bytes.readDoubleBE(at); at += 8; return v; }
      case 0xcc: return u(1);
      case 0xcd: return u(2);
      case 0xce: return u(4);
      case 0xcf: return big(false);
      case 0xd0: { need(1); const v = bytes.readInt8(at); at += 1; return v; }
      case 0xd1: { need(2); const v = bytes.readInt16BE(at); at += 2; return v; }
      case 0xd2: { need(4); const v = bytes.readInt32BE(at); at += 4; return v; }
      case 0xd3: return big(true);
      case 0xd4: return ext(1);
      case 0xd5: return ext(2);
      case 0xd6: return ext(4);
      case 0xd7: return ext(8);
      case 0xd8: return ext(16);
      case 0xd9: return str(u(1));
      case 0xda: return str(u(2));
      case 0xdb: return str(u(4));
      case 0xdc: return arr(u(2));
      case 0xdd: return arr(u(4));
      case 0xde: return map(u(2));
      case 0xdf: return map(u(4));
      default: throw new Error(`the payload holds the byte 0x${t.toString(16)}, which begins no MessagePack value`);
    }
  };
  const v = read();
  if (at !== bytes.length) throw new Error(`the payload has ${bytes.length - at} bytes after its MessagePack value`);
  return v;
}
