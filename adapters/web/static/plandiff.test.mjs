import { test } from "node:test";
import assert from "node:assert/strict";

import { diffItems, diffHistory, evidenceChanges } from "./plandiff.js";

test("a revision's diff: added, removed and status changes, matched by content", () => {
  const before = [
    { content: "read", status: "completed" },
    { content: "write", status: "in_progress" },
    { content: "old", status: "pending" },
  ];
  const after = [
    { content: "read", status: "completed" },
    { content: "write", status: "completed" },
    { content: "ship", status: "pending" },
  ];
  assert.deepEqual(diffItems(before, after), [
    { kind: "changed", item: { content: "write", status: "completed" }, from: "in_progress" },
    { kind: "added", item: { content: "ship", status: "pending" } },
    { kind: "removed", item: { content: "old", status: "pending" } },
  ]);
  assert.deepEqual(diffItems(after, after), []);
});

test("items with the same text match one to one", () => {
  const before = [{ content: "test", status: "completed" }];
  const after = [{ content: "test", status: "completed" }, { content: "test", status: "pending" }];
  assert.deepEqual(diffItems(before, after), [{ kind: "added", item: { content: "test", status: "pending" } }]);
  assert.deepEqual(diffItems(after, before), [{ kind: "removed", item: { content: "test", status: "pending" } }]);
});

test("the history lists revisions newest first, the first adding every item", () => {
  const revs = [
    { revision: 1, items: [{ content: "a", status: "pending" }] },
    { revision: 2, items: [{ content: "a", status: "in_progress" }] },
    { revision: 3, items: [{ content: "a", status: "in_progress" }] },
  ];
  const h = diffHistory(revs);
  assert.deepEqual(h.map((x) => [x.rev.revision, x.first, x.changes.map((c) => c.kind)]), [
    [3, false, []],
    [2, false, ["changed"]],
    [1, true, ["added"]],
  ]);
  assert.deepEqual(diffHistory(null), []);
});

test("each revision lists the evidence lines that changed with it, as of that revision", () => {
  const revs = [
    { revision: 1, items: [{ content: "a", status: "in_progress" }, { content: "b", status: "pending" }], view: { items: [{ evidence: "↳ fs__read" }, {}] } },
    { revision: 2, items: [{ content: "a", status: "completed" }, { content: "b", status: "completed" }], view: { items: [{ evidence: "↳ fs__read" }, { evidence: "↳ no tool activity" }] } },
    { revision: 3, items: [{ content: "a", status: "completed" }, { content: "b2", status: "in_progress" }], view: { items: [{ evidence: "↳ fs__read ×2" }, {}] } },
  ];
  assert.deepEqual(evidenceChanges(null, revs[0]), [{ content: "a", evidence: "↳ fs__read" }]);
  assert.deepEqual(evidenceChanges(revs[0], revs[1]), [{ content: "b", evidence: "↳ no tool activity" }]);
  assert.deepEqual(evidenceChanges(revs[1], revs[2]), [{ content: "a", evidence: "↳ fs__read ×2" }]);
  assert.deepEqual(diffHistory(revs).map((x) => [x.rev.revision, x.evidence.map((e) => e.content)]), [[3, ["a"]], [2, ["b"]], [1, ["a"]]]);
  // A revision from before evidence (no view) lists none.
  assert.deepEqual(evidenceChanges(null, { revision: 1, items: [{ content: "a", status: "completed" }] }), []);
  // Items with the same text share their evidence: listed once.
  const twice = { items: [{ content: "t", status: "completed" }, { content: "t", status: "pending" }], view: { items: [{ evidence: "↳ x" }, { evidence: "↳ x" }] } };
  assert.deepEqual(evidenceChanges(null, twice), [{ content: "t", evidence: "↳ x" }]);
});
