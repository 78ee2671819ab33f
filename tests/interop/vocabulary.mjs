// One scenario's answers from the Node package (tests/tests/vocabulary.rs compares them with
// Rust's and Python's): queue `voc`'s counts, its policy as shown, and parent `flow-p`'s
// children's results, as JSON on stdout. Usage: node vocabulary.mjs <redis url>
import { Queue } from "../../node/dist/esm/index.js";

const q = new Queue("voc", { url: process.argv[2] });
const client = await q.waitUntilReady();
// Node names the ended counters as BullMQ users read them (`totals`); the others keep them flat
const { waiting, delayed, running, totals } = await q.getJobCounts();
const counts = { waiting, delayed, running, ...totals };
const kids = await client.children("flow-p");
// a child's result by the reading rule, as every language answers it
const children = Object.fromEntries(Object.entries(kids).map(([k, v]) => [k, { status: v.status, output: v.output, error: v.error }]));
const out = { counts, policy: await q.getPolicy(), children };
process.stdout.write(JSON.stringify(out) + "\n");
await q.close();
