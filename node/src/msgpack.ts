// MessagePack for JSON values: a job's payload is MessagePack in the record (what the Rust SDK
// writes with rmp-serde, field names kept), so a payload a Node producer gives is read by a
// handler in any language, and the other way round. Small enough not to need a dependency.

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export function encode(value: Json): Buffer {
  const out: Buffer[] = [];
  write(value, out);
  return Buffer.concat(out);
}

function write(v: Json, out: Buffer[]): void {
  if (v === null) out.push(Buffer.from([0xc0]));
  else if (v === true) out.push(Buffer.from([0xc3]));
  else if (v === false) out.push(Buffer.from([0xc2]));
  else if (typeof v === "number") {
    if (Number.isInteger(v) && v >= 0 && v < 2 ** 32) {
      if (v < 128) out.push(Buffer.from([v]));
      else {
        const b = Buffer.alloc(5);
        b[0] = 0xce;
        b.writeUInt32BE(v, 1);
        out.push(b);
      }
    } else if (Number.isInteger(v) && v < 0 && v >= -(2 ** 31)) {
      if (v >= -32) out.push(Buffer.from([v & 0xff]));
      else {
        const b = Buffer.alloc(5);
        b[0] = 0xd2;
        b.writeInt32BE(v, 1);
        out.push(b);
      }
    } else {
      const b = Buffer.alloc(9);
      b[0] = 0xcb;
      b.writeDoubleBE(v, 1);
      out.push(b);
    }
  } else if (typeof v === "string") {
    const s = Buffer.from(v, "utf8");
    out.push(header(s.length, 0xa0, 31, 0xd9, 0xda, 0xdb), s);
  } else if (Array.isArray(v)) {
    out.push(header(v.length, 0x90, 15, null, 0xdc, 0xdd));
    for (const x of v) write(x, out);
  } else {
    const entries = Object.entries(v).filter(([, x]) => x !== undefined);
    out.push(header(entries.length, 0x80, 15, null, 0xde, 0xdf));
    for (const [k, x] of entries) {
      write(k, out);
      write(x, out);
    }
  }
}

function header(n: number, fix: number, fixMax: number, b8: number | null, b16: number, b32: number): Buffer {
  if (n <= fixMax) return Buffer.from([fix | n]);
  if (b8 !== null && n < 256) return Buffer.from([b8, n]);
  if (n < 65536) {
    const b = Buffer.alloc(3);
    b[0] = b16;
    b.writeUInt16BE(n, 1);
    return b;
  }
  const b = Buffer.alloc(5);
  b[0] = b32;
  b.writeUInt32BE(n, 1);
  return b;
}

/** The JSON value MessagePack bytes hold (binary and extension types are refused). */
export function decode(bytes: Buffer): Json {
  let at = 0;
  const need = (n: number) => {
    if (at + n > bytes.length) throw new Error("the payload's MessagePack ends early");
  };
  const u = (n: number): number => {
    need(n);
    const v = n === 1 ? bytes.readUInt8(at) : n === 2 ? bytes.readUInt16BE(at) : n === 4 ? bytes.readUInt32BE(at) : Number(bytes.readBigUInt64BE(at));
    at += n;
    return v;
  };
  const str = (n: number): string => {
    need(n);
    const s = bytes.toString("utf8", at, at + n);
    at += n;
    return s;
  };
  const arr = (n: number): Json[] => Array.from({ length: n }, () => read());
  const map = (n: number): { [k: string]: Json } => {
    const o: { [k: string]: Json } = {};
    for (let i = 0; i < n; i++) {
      const k = read();
      o[String(k)] = read();
    }
    return o;
  };
  const read = (): Json => {
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
      case 0xcc: return u(1);
      case 0xcd: return u(2);
      case 0xce: return u(4);
      case 0xcf: return u(8);
      case 0xd0: { need(1); const v = bytes.readInt8(at); at += 1; return v; }
      case 0xd1: { need(2); const v = bytes.readInt16BE(at); at += 2; return v; }
      case 0xd2: { need(4); const v = bytes.readInt32BE(at); at += 4; return v; }
      case 0xd3: { need(8); const v = Number(bytes.readBigInt64BE(at)); at += 8; return v; }
      case 0xca: { need(4); const v = bytes.readFloatBE(at); at += 4; return v; }
      case 0xcb: { need(8); const v = bytes.readDoubleBE(at); at += 8; return v; }
      case 0xd9: return str(u(1));
      case 0xda: return str(u(2));
      case 0xdb: return str(u(4));
      case 0xdc: return arr(u(2));
      case 0xdd: return arr(u(4));
      case 0xde: return map(u(2));
      case 0xdf: return map(u(4));
      default: throw new Error(`the payload holds MessagePack type 0x${t.toString(16)}, which is not JSON`);
    }
  };
  return read();
}
