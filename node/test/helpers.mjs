// The test kit: a throwaway redis-server on a free loopback port, killed by pid; the `hero`
// binary of this checkout (target/debug/hero, built by scripts/test) for brokers, Rust workers
// and the CLI; bounded waits.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const HERO = process.env.HERO_BIN ?? join(ROOT, "target", "debug", "hero");

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

export async function waitFor(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A redis-server of its own: `{ url, stop() }`. */
export async function redisServer() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "hero-node-redis-"));
  const p = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], { stdio: "ignore" });
  const url = `redis://127.0.0.1:${port}`;
  await waitFor("redis-server to answer", () =>
    new Promise((resolve) => {
      const c = net.connect(port, "127.0.0.1", () => {
        c.end();
        resolve(true);
      });
      c.on("error", () => resolve(false));
    }),
  );
  return {
    url,
    stop() {
      p.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function env() {
  const e = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("HERO_")) e[k] = v;
  return e;
}

/** A `hero` process (broker, worker) until stopped: `{ proc, stop() }`. */
export function heroProcess(url, args) {
  const proc = spawn(HERO, ["--redis-url", url, ...args], { env: env(), stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  proc.stderr.on("data", (d) => (err += d));
  return {
    proc,
    output: () => err,
    async stop() {
      if (proc.exitCode !== null) return;
      const done = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      const t = setTimeout(() => proc.kill("SIGKILL"), 15_000);
      await done;
      clearTimeout(t);
    },
  };
}

/** `hero <args>` against `url`: its stdout (throws with stderr when it fails). */
export function hero(url, ...args) {
  return execFileSync(HERO, ["--redis-url", url, ...args], { env: env(), encoding: "utf8", timeout: 60_000 });
}
