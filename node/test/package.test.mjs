// What a registry would serve is what `npm pack` makes, from a copy of the package's folder
// alone (outside the repository: the build reads nothing beside it): the tarball installs into a
// fresh project with `npm install <tarball>`, brings ioredis, and works from CommonJS `require`
// and ESM `import`, types included.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { heroProcess, redisServer, ROOT, waitFor } from "./helpers.mjs";

let redis, broker, worker, dir;

before(async () => {
  redis = await redisServer();
  broker = heroProcess(redis.url, ["broker", "--http", "off"]);
  worker = heroProcess(redis.url, ["worker", "--types", "rhai"]);
  dir = mkdtempSync(join(tmpdir(), "hero-node-pack-"));
});

after(async () => {
  await worker?.stop();
  await broker?.stop();
  redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a copy of the folder packs; the tarball installs into a fresh project; the README's example runs as written", async () => {
  // the folder as a user would have it from git: its sources, no dist, no repository around it
  const pkg = join(dir, "hero-broker-copy");
  for (const f of ["src", "scripts", "package.json", "package-lock.json", "tsconfig.json", "README.md", "LICENSE", "hero-library.lua"]) {
    cpSync(join(ROOT, "node", f), join(pkg, f), { recursive: true });
  }
  rmSync(join(pkg, "src", "library.generated.ts"), { force: true });
  // its dev dependencies (TypeScript) as `npm install` would have put them
  symlinkSync(join(ROOT, "node", "node_modules"), join(pkg, "node_modules"));
  const name = execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: pkg, encoding: "utf8" }).trim().split("\n").pop();
  const tarball = join(dir, name);
  assert.ok(existsSync(tarball), tarball);
  const project = join(dir, "project");
  execFileSync("mkdir", ["-p", project]);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "scratch", private: true }));
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--silent", tarball], { cwd: project, stdio: "inherit" });
  assert.ok(existsSync(join(project, "node_modules", "ioredis")), "ioredis came with it");
  assert.ok(existsSync(join(project, "node_modules", "hero-broker", "dist", "types", "index.d.ts")), "types shipped");
  const env = { ...process.env, HERO_REDIS_URL: redis.url };
  writeFileSync(
    join(project, "cjs.cjs"),
    `const { Client } = require("hero-broker");
     (async () => {
       const c = await Client.connect();
       const r = await c.run({ type: "rhai", script: "6 * 7" }, 20000);
       console.log(r.status, r.output);
       await c.close();
     })().catch((e) => { console.error(e); process.exit(1); });`,
  );
  writeFileSync(
    join(project, "esm.mjs"),
    `import { Client } from "hero-broker";
     const c = await Client.connect();
     const r = await c.run({ type: "rhai", script: "\\"esm\\"" }, 20000);
     console.log(r.status, r.output);
     await c.close();`,
  );
  await waitFor("the Rust worker", async () => true);
  assert.equal(execFileSync("node", ["cjs.cjs"], { cwd: project, env, encoding: "utf8", timeout: 60_000 }).trim(), "finished 42");
  assert.equal(execFileSync("node", ["esm.mjs"], { cwd: project, env, encoding: "utf8", timeout: 60_000 }).trim(), "finished esm");
  // node/README.md's first example, as written: a Node worker and a producer
  const readme = readFileSync(join(ROOT, "node", "README.md"), "utf8");
  const example = /```js\n([\s\S]*?)```/.exec(readme)[1];
  writeFileSync(join(project, "readme.mjs"), example);
  assert.equal(
    execFileSync("node", ["readme.mjs"], { cwd: project, env, encoding: "utf8", timeout: 60_000 }).trim(),
    "finished HELLO FROM NODE",
  );
});
