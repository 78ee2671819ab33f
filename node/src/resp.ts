// A command's RESP bytes written straight into one Buffer, for the calls a worker and a
// producer make per job (fetch, complete, submit): ioredis builds a `Command` by flattening its
// arguments, measuring each one (`Buffer.byteLength`) and gluing strings and Buffers together
// piece by piece, which cost the worker a fifth of its time on a batch's thousand arguments.
// Here each argument is written once (an ASCII string by a plain loop, anything else by one
// native write), and the command goes to ioredis as a `RawCommand` that hands those bytes to
// the socket: ioredis still owns the connection, the reply's parsing, its queue of commands
// and their resending after a reconnect. A connection with a `keyPrefix` (a caller's own
// ioredis instance) goes through ioredis's own path, which prefixes the keys.
import { Command, Redis } from "ioredis";

/** One argument: text (UTF-8), a number (its decimal text) or bytes. */
export type Arg = string | number | Buffer;

/** Strings longer than this go to the native UTF-8 writer at once (a loop wins on short ones). */
const LOOP_MAX = 64;
/** Room kept in front of the arguments for the `*<count>\r\n` header, written last. */
const HEAD = 16;

let scratch = Buffer.allocUnsafe(64 * 1024);

function digits(n: number): number {
  return n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10000 ? 4 : n < 100000 ? 5 : String(n).length;
}

/** Writes a command's arguments, then `done()` answers its bytes (a Buffer of its own). One
 * writer at a time: it writes into a shared scratch buffer, copied out by `done`. */
export class Resp {
  private buf = scratch;
  private at = HEAD;
  private count = 0;

  private room(n: number): void {
    if (this.at + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + n + 1024));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
    scratch = next;
  }

  /** `n` written as decimal digits at `at` (n a whole number, 0 or more); answers the end. */
  private uint(n: number, at: number): number {
    const b = this.buf;
    if (n < 10) {
      b[at] = 48 + n;
      return at + 1;
    }
    const d = digits(n);
    let end = at + d;
    for (let i = end - 1; i >= at; i--) {
      b[i] = 48 + (n % 10);
      n = Math.floor(n / 10);
    }
    return end;
  }

  /** A bulk string of `s` (UTF-8). */
  str(s: string): this {
    const n = s.length;
    this.room(n * 3 + 32);
    const b = this.buf;
    const d = digits(n);
    // the text goes where a header of `n` bytes ends; moved when its UTF-8 length has more
    // digits than its length in characters
    let p = this.at + d + 3;
    let len = n;
    if (n <= LOOP_MAX) {
      for (let i = 0; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c >= 0x80) {
          len = b.write(s, p, "utf8");
          break;
        }
        b[p + i] = c;
      }
    } else {
      len = b.write(s, p, "utf8");
    }
    const dl = digits(len);
    if (dl !== d) {
      b.copyWithin(p + dl - d, p, p + len);
      p += dl - d;
    }
    b[this.at] = 36; // $
    const e = this.uint(len, this.at + 1);
    b[e] = 13;
    b[e + 1] = 10;
    p += len;
    b[p] = 13;
    b[p + 1] = 10;
    this.at = p + 2;
    this.count++;
    return this;
  }

  /** A bulk string of `a` followed by `b` (a key of a prefix and an id), neither joined first. */
  str2(a: string, s: string): this {
    // short ASCII parts, as keys are: written as one; otherwise joined
    const n = a.length + s.length;
    if (n > LOOP_MAX) return this.str(a + s);
    this.room(n * 3 + 32);
    const b = this.buf;
    const d = digits(n);
    const p = this.at + d + 3;
    for (let i = 0; i < a.length; i++) {
      const c = a.charCodeAt(i);
      if (c >= 0x80) return this.str(a + s);
      b[p + i] = c;
    }
    const q = p + a.length;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) return this.str(a + s);
      b[q + i] = c;
    }
    b[this.at] = 36;
    const e = this.uint(n, this.at + 1);
    b[e] = 13;
    b[e + 1] = 10;
    b[p + n] = 13;
    b[p + n + 1] = 10;
    this.at = p + n + 2;
    this.count++;
    return this;
  }

  /** A bulk string of a number's decimal text. */
  num(n: number): this {
    if (!(Number.isInteger(n) && n >= 0 && n < 1e15)) return this.str(String(n));
    const d = digits(n);
    this.room(d * 2 + 8);
    const b = this.buf;
    b[this.at] = 36;
    let e = this.uint(d, this.at + 1);
    b[e] = 13;
    b[e + 1] = 10;
    e = this.uint(n, e + 2);
    b[e] = 13;
    b[e + 1] = 10;
    this.at = e + 2;
    this.count++;
    return this;
  }

  /** A bulk string of bytes. */
  bytes(v: Buffer): this {
    const n = v.length;
    this.room(n + 32);
    const b = this.buf;
    b[this.at] = 36;
    let e = this.uint(n, this.at + 1);
    b[e] = 13;
    b[e + 1] = 10;
    e += 2;
    if (n <= 16) for (let i = 0; i < n; i++) b[e + i] = v[i];
    else v.copy(b, e);
    e += n;
    b[e] = 13;
    b[e + 1] = 10;
    this.at = e + 2;
    this.count++;
    return this;
  }

  /** Any argument. */
  arg(v: Arg): this {
    if (typeof v === "string") return this.str(v);
    if (typeof v === "number") return this.num(v);
    return this.bytes(v);
  }

  /** The command's bytes: `*<count>` and the arguments written, copied out of the scratch. */
  done(): Buffer {
    const b = this.buf;
    const h = digits(this.count) + 3;
    const start = HEAD - h;
    b[start] = 42; // *
    const e = this.uint(this.count, start + 1);
    b[e] = 13;
    b[e + 1] = 10;
    const out = Buffer.allocUnsafe(this.at - start);
    b.copy(out, 0, start, this.at);
    this.at = HEAD;
    this.count = 0;
    return out;
  }
}

/** A command whose bytes were written already (by `Resp`): ioredis sends them as they are and
 * parses the reply as it parses every other (as Buffers: `callBuffer`'s replies). */
export class RawCommand extends Command {
  private readonly wire: Buffer;

  constructor(name: string, wire: Buffer) {
    super(name, [], { replyEncoding: null });
    this.wire = wire;
  }

  toWritable(): Buffer {
    return this.wire;
  }
}

/** Whether `redis` takes raw commands: not with a key prefix (ioredis adds it to each key). */
export function rawOk(redis: Redis): boolean {
  return !redis.options?.keyPrefix;
}

/** Sends `FCALL`-like `command` of `args` on `redis` as raw bytes (through ioredis's own
 * path when `rawOk` says no); the reply as `callBuffer` answers it. */
export function sendArgs(redis: Redis, command: string, args: Arg[]): Promise<unknown> {
  if (!rawOk(redis)) return redis.callBuffer(command, ...args);
  const w = new Resp().str(command);
  for (let i = 0; i < args.length; i++) w.arg(args[i]);
  return redis.sendCommand(new RawCommand(command.toLowerCase(), w.done())) as Promise<unknown>;
}

// -- reading replies ---------------------------------------------------------------------------

/** Text of a reply item (a Buffer, a string, a number, or nil). */
export function text(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (Buffer.isBuffer(v)) return v.toString();
  return String(v);
}

/** The text of reply items that repeat (a status a job): the last two texts read are kept, and
 * an item of the same bytes answers the same string. */
export class Words {
  private a: [unknown, string] | null = null;
  private b: [unknown, string] | null = null;

  of(v: unknown): string {
    if (this.a !== null && same(v, this.a[0])) return this.a[1];
    if (this.b !== null && same(v, this.b[0])) return this.b[1];
    const t = text(v);
    this.b = this.a;
    this.a = [v, t];
    return t;
  }
}

function same(x: unknown, y: unknown): boolean {
  if (x === y) return true;
  if (!Buffer.isBuffer(x) || !Buffer.isBuffer(y) || x.length !== y.length || x.length > 32) return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** A reply item holding a whole number 0 or more (its digits as bytes), as a number; NaN when
 * it holds anything else. */
export function whole(v: unknown): number {
  if (typeof v === "number") return v;
  if (Buffer.isBuffer(v) && v.length > 0 && v.length < 16) {
    let n = 0;
    for (let i = 0; i < v.length; i++) {
      const c = v[i] - 48;
      if (c < 0 || c > 9) return NaN;
      n = n * 10 + c;
    }
    return n;
  }
  return Number(text(v));
}
