import { test } from "node:test";
import assert from "node:assert/strict";

import { ThreadReplay, ListSeqs, mergeList, olderPlan } from "./replay.js";

const plan = (seq) => ({ type: "plan", thread: "web/a", seq, plan: { revision: seq } });
const message = (seq, id) => ({ type: "message", thread: "web/a", seq, message: { id, text: id } });
const seqs = (events) => events.map((e) => e.seq);

test("events that come during a fetch are replayed in order on top of its answer", () => {
  const r = new ThreadReplay();
  const token = r.begin();
  assert.deepEqual(r.offer(plan(7)), []);
  assert.deepEqual(r.offer(plan(5)), []); // arrived late, is older
  assert.deepEqual(r.offer(message(4, "m1")), []);
  assert.deepEqual(r.offer(plan(3)), []);
  const res = r.answer(token, 4); // the fetch read the thread at seq 4
  assert.equal(res.show, true);
  // 3 is in the answer already; the message (4) may be missing from it,
  // so it is passed on (the timeline shows each id once); 5 and 7 are news.
  assert.deepEqual(seqs(res.events), [4, 5, 7]);
  assert.equal(r.seq, 7);
  assert.deepEqual(r.offer(plan(8)), [plan(8)]); // live now
});

test("an older event never overwrites a newer one, a message always adds up", () => {
  const r = new ThreadReplay();
  r.seed(10);
  assert.deepEqual(r.offer(plan(9)), []);
  assert.deepEqual(r.offer(plan(10)), []);
  assert.deepEqual(seqs(r.offer(message(9, "m2"))), [9]);
  assert.equal(r.seq, 10);
  assert.deepEqual(seqs(r.offer(plan(11))), [11]);
  assert.deepEqual(seqs(r.offer({ type: "thread", thread: "web/a" })), [undefined]); // no seq: applied
});

test("a superseded fetch's answer is dropped; a resync's is shown even if older", () => {
  const r = new ThreadReplay();
  const first = r.begin();
  const second = r.begin();
  assert.equal(r.answer(first, 3), null);
  assert.equal(r.failed(first), null);
  assert.equal(r.busy, true); // still waiting for the second
  assert.equal(r.answer(second, 3).show, true);

  r.offer(plan(9));
  assert.equal(r.seq, 9);
  assert.equal(r.answer(r.begin(), 2).show, false); // a plain refetch behind the live state
  assert.equal(r.seq, 9);
  const res = r.answer(r.begin(true), 2); // the server restarted: its seq starts over
  assert.equal(res.show, true);
  assert.equal(r.seq, 2);
  assert.deepEqual(seqs(r.offer(plan(3))), [3]);
});

test("a failed fetch hands back what it held", () => {
  const r = new ThreadReplay();
  const token = r.begin();
  r.offer(plan(2));
  r.offer(plan(1));
  assert.deepEqual(seqs(r.failed(token)), [1, 2]);
  assert.equal(r.busy, true); // nothing loaded yet: later events wait for a load
  assert.deepEqual(r.offer(plan(3)), []);
});

test("the list keeps state newer than a fetch of it", () => {
  const seen = new ListSeqs();
  const old = new Map([
    ["web/a", { key: "web/a", seq: 6, status: "done", status_class: "pill-done", state: "idle", title: "a", unread: true, updated: "2026-09-01T12:00:05Z" }],
    ["web/new", { key: "web/new", seq: 1, title: "made here" }],
    ["web/gone", { key: "web/gone", seq: 1 }],
  ]);
  seen.set("web/a", 6);
  assert.equal(seen.admit("web/a", 6), false);
  const list = [
    { key: "web/a", seq: 4, status: "working", status_class: "pill-working", state: "running", title: "renamed", updated: "2026-09-01T12:00:00Z" },
    { key: "web/b", seq: 2, status: "", title: "b" },
    { key: "web/gone", seq: 1 },
  ];
  const next = mergeList({ old, list, seqs: seen, deleted: new Set(["web/gone"]), created: new Map([["web/new", 5]]), started: 1 });
  assert.deepEqual([...next.keys()], ["web/a", "web/b", "web/new"]);
  const a = next.get("web/a");
  assert.deepEqual([a.title, a.status, a.status_class, a.state, a.seq, a.unread, a.updated], ["renamed", "done", "pill-done", "idle", 6, true, "2026-09-01T12:00:05Z"]);
  assert.equal(seen.get("web/b"), 2);
  // A resync takes the answer whole.
  const again = mergeList({ old: next, list, seqs: seen, resync: true });
  assert.equal(again.get("web/a").status, "working");
  assert.equal(seen.get("web/a"), 4);
});

test("olderPlan orders plans by revision, then time", () => {
  const cur = { revision: 3, updated: "2026-09-01T12:00:05Z" };
  assert.equal(olderPlan({ revision: 2, updated: "2026-09-01T13:00:00Z" }, cur), true);
  assert.equal(olderPlan({ revision: 3, updated: "2026-09-01T12:00:04Z" }, cur), true);
  assert.equal(olderPlan({ revision: 3, updated: "2026-09-01T12:00:05Z" }, cur), false);
  assert.equal(olderPlan({ revision: 1 }, null), false);
});
