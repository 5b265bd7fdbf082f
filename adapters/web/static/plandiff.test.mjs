import { test } from "node:test";
import assert from "node:assert/strict";

import { diffItems, diffHistory } from "./plandiff.js";

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
