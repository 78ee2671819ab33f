// The upkeep's budget (duties.ts): a call that answered `more` having moved nothing (a walk over
// running jobs cut short) doubles the next call's budget up to BUDGET_MAX, so the walk gets
// through instead of a call every millisecond or two without end; anything else goes back to
// BUDGET.
import assert from "node:assert/strict";
import test from "node:test";

import { BUDGET, BUDGET_MAX, nextBudget } from "../dist/esm/duties.js";

const answer = (more, moved = {}) => ({ held: true, holder: "w", promoted: 0, recovered: 0, dead: 0, timedOut: 0, expired: 0, more, fired: 0, skipped: 0, ...moved });

test("a walk cut short with nothing moved doubles the next budget, up to BUDGET_MAX", () => {
  assert.equal(nextBudget(answer(true), BUDGET), BUDGET * 2);
  assert.equal(nextBudget(answer(true), BUDGET * 2), BUDGET * 4);
  assert.equal(nextBudget(answer(true), BUDGET_MAX), BUDGET_MAX);
  // through, or a call that moved jobs (a backlog of due jobs, expired ones): the usual budget
  assert.equal(nextBudget(answer(false), BUDGET_MAX), BUDGET);
  for (const k of ["promoted", "recovered", "dead", "timedOut", "expired", "fired", "skipped"]) {
    assert.equal(nextBudget(answer(true, { [k]: 1 }), BUDGET * 2), BUDGET, k);
  }
});
