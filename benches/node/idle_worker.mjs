// One idle Node worker for benches/idle-duties: serves a type no job is submitted to, with its
// duties on or off (HERO_DUTIES=on|off), until killed.
import { Worker } from "../../node/dist/esm/index.js";

const url = process.argv[2];
new Worker("idle", async (job) => job.data, {
  url,
  concurrency: 1,
  duties: process.env.HERO_DUTIES !== "off",
});
