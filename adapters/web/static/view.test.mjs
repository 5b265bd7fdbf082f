import { test } from "node:test";
import assert from "node:assert/strict";

import { planTitle, planFooter, planProgress, stopButton, startButton, pill, running, cardView, revisionProgress, statusName, itemEvidence, callView, duration, itemMark, planAccent, itemControls, itemStruck, findControl, newItemText, revisionChange } from "./view.js";

test("the plan's title, footer and Stop button are the server's", () => {
  const plan = {
    items: [{ content: "a", status: "completed" }, { content: "b", status: "pending" }],
    revision: 4, state: "working", stoppable: true,
    view: { title: "Plan · 1/2 done", progress: "1/2 done", footer: "Updated 2026-09-01 12:00:00 UTC · revision 4 · working", stop: { id: "pinplan:stop:plan", label: "Stop" } },
  };
  assert.equal(planTitle(plan), "Plan · 1/2 done");
  assert.equal(planFooter(plan), "Updated 2026-09-01 12:00:00 UTC · revision 4 · working");
  assert.equal(planProgress(plan), "1/2 done");
  assert.deepEqual(stopButton(plan), { id: "pinplan:stop:plan", label: "Stop" });
  // Nothing is made up on the page: no view, no words.
  assert.equal(planFooter({ items: plan.items, revision: 4 }), "");
  assert.equal(planProgress({ items: [], view: { progress: "0/0 done" } }), "");
  assert.equal(stopButton({ ...plan, view: { ...plan.view, stop: undefined } }), null);
  assert.equal(revisionProgress({ revision: 1, view: { progress: "0/3 done" } }), "0/3 done");
  assert.equal(revisionChange({ revision: 3, view: { progress: "0/2 done", change: "Skipped by ann: b" } }), "Skipped by ann: b");
  assert.equal(revisionChange({ revision: 2, view: { progress: "0/3 done" } }), ""); // the agent's
});

test("pills take the server's status and class; the status decides whether a turn runs", () => {
  assert.deepEqual(pill({ status: "waiting for approval", status_class: "pill-waiting" }), { text: "waiting for approval", cls: "pill-waiting" });
  assert.deepEqual(pill({ status: "", state: "idle" }), { text: "", cls: "pill-idle" });
  assert.deepEqual(pill(null), { text: "", cls: "pill-idle" });
  assert.equal(running({ status: "resumed after restart", status_class: "pill-working", state: "idle" }), true);
  assert.equal(running({ status: "done", status_class: "pill-done", state: "running" }), false); // the store's state lags
  assert.equal(running({ status: "", state: "running" }), true);
  assert.equal(running(null), false);
});

test("a card's words and buttons are the server's", () => {
  const buttons = [{ id: "pinplan:allow:c1", action: "allow", label: "Allow once", style: "primary" }];
  const card = { id: "c1", tool: "fs__write", view: { title: "Approval needed: fs__write", status: "Waiting for a decision.", class: "open", buttons } };
  assert.deepEqual(cardView(card), { title: "Approval needed: fs__write", status: "Waiting for a decision.", cls: "open", buttons });
  assert.deepEqual(cardView({ id: "c2", tool: "x", outcome: "Denied" }), { title: "x", status: "Denied", cls: "decided", buttons: [] });
  assert.equal(statusName({ in_progress: "in progress" }, "in_progress"), "in progress");
});

test("an item's evidence: the server's line, and the calls behind it by the item's text", () => {
  const read = { tool: "fs__read_text_file", server: "fs", outcome: "ok", start: "2026-11-30T09:30:01Z", duration: 120000000, args: '{"path":"notes.md"}' };
  const write = { tool: "fs__write_file", server: "fs", outcome: "denied", approver: "ann", start: "2026-11-30T09:30:04Z", duration: 2500000000, args: "{}" };
  const plan = {
    items: [{ content: "read", status: "completed" }, { content: "tidy", status: "completed" }, { content: "write", status: "in_progress" }, { content: "ship", status: "pending" }],
    evidence: { read: { calls: [read, read], more: 3 }, write: { calls: [write] } },
    view: { items: [{ evidence: "↳ fs__read_text_file ×2, +3 more" }, { evidence: "↳ no tool activity" }, { evidence: "↳ fs__write_file (denied)" }, {}] },
  };
  const r = itemEvidence(plan, 0);
  assert.equal(r.line, "↳ fs__read_text_file ×2, +3 more");
  assert.equal(r.more, 3);
  assert.deepEqual(r.calls[0], { tool: "fs__read_text_file", server: "fs", outcome: "ok", failed: false, approver: "", start: "2026-11-30T09:30:01Z", took: "120 ms", args: '{"path":"notes.md"}' });
  assert.equal(r.calls.length, 2);
  assert.deepEqual(itemEvidence(plan, 1), { line: "↳ no tool activity", calls: [], more: 0 });
  const w = itemEvidence(plan, 2);
  assert.equal(w.calls[0].failed, true);
  assert.equal(w.calls[0].approver, "denied by ann");
  assert.equal(w.calls[0].took, "2.5 s");
  assert.deepEqual(itemEvidence(plan, 3), { line: "", calls: [], more: 0 });
  // No view, no line: the page does not make one up; no plan, nothing.
  assert.equal(itemEvidence({ items: plan.items, evidence: plan.evidence }, 0).line, "");
  assert.deepEqual(itemEvidence(null, 0), { line: "", calls: [], more: 0 });
  assert.equal(callView({ tool: "t", outcome: "ok", approver: "bob" }).approver, "allowed by bob");
  assert.equal(callView({ tool: "t", outcome: "timeout" }).failed, true);
});

test("a call's duration in words", () => {
  assert.equal(duration(0), "0 ms");
  assert.equal(duration(850e6), "850 ms");
  assert.equal(duration(1234e6), "1.2 s");
  assert.equal(duration(42.9e9), "42 s");
  assert.equal(duration(125e9), "2 min 5 s");
  assert.equal(duration(undefined), "");
  assert.equal(duration(-1), "");
});

test("an ended plan's item left in progress shows the server's mark; the border follows the run state", () => {
  const marks = { pending: "⬜", in_progress: "🔄", completed: "✅" };
  const plan = {
    state: "stopped", items: [{ content: "a", status: "completed" }, { content: "b", status: "in_progress" }],
    view: { accent: "stopped", items: [{ mark: "✅" }, { mark: "⏸️" }] },
  };
  assert.equal(itemMark(plan, 1, marks), "⏸️");
  assert.equal(itemMark(plan, 0, marks), "✅");
  // Without a view: the status's mark.
  assert.equal(itemMark({ items: plan.items }, 1, marks), "🔄");
  assert.equal(planAccent(plan), "stopped");
  assert.equal(planAccent({ items: plan.items }), "working");
});

test("an item's controls are the server's, with the ids it reads back; a skipped item is struck", () => {
  const skip = { id: "pinplan:skip:4.aa", action: "skip", label: "Skip", style: "secondary" };
  const addB = { id: "pinplan:add:4.bb", action: "add", label: "Add an item after", style: "secondary" };
  const reopen = { id: "pinplan:reopen:4.cc", action: "reopen", label: "Reopen", style: "secondary" };
  const addC = { id: "pinplan:add:4.cc", action: "add", label: "Add an item after", style: "secondary" };
  const plan = {
    revision: 4,
    items: [{ content: "a", status: "completed" }, { content: "b", status: "pending" }, { content: "c", status: "skipped" }],
    view: { items: [{ mark: "✅", struck: true }, { mark: "⬜", controls: [skip, addB] }, { mark: "⏭️", struck: true, evidence: "↳ skipped by ann", controls: [reopen, addC] }] },
  };
  assert.deepEqual(itemControls(plan, 1), [skip, addB]);
  assert.deepEqual(itemControls(plan, 0), []); // none offered on it
  assert.deepEqual(itemControls({ items: plan.items }, 1), []); // no view, no controls: the page makes none up
  assert.deepEqual(itemControls(null, 0), []);
  assert.equal(itemStruck(plan, 2), true);
  assert.equal(itemStruck(plan, 1), false);
  assert.equal(itemEvidence(plan, 2).line, "↳ skipped by ann");
  // Without a view: only a done item is struck.
  assert.equal(itemStruck({ items: plan.items }, 0), true);
  assert.equal(itemStruck({ items: plan.items }, 2), false);
  // An open Add form finds its item's control by the item's text.
  assert.deepEqual(findControl(plan, "c", "add"), addC);
  assert.deepEqual(findControl(plan, "b", "skip"), skip);
  assert.equal(findControl(plan, "c", "skip"), null);
  assert.equal(findControl(plan, "gone", "add"), null);
  assert.equal(findControl(null, "b", "add"), null);
});

test("a new item's text is checked as the server counts it", () => {
  assert.deepEqual(newItemText("  Write the notes \n", 1000), { text: "Write the notes", error: "" });
  assert.equal(newItemText("   ", 1000).error, "Type the new item first.");
  assert.equal(newItemText(undefined, 1000).error, "Type the new item first.");
  // Characters are code points: 1,000 emoji are 2,000 UTF-16 units, and allowed.
  assert.equal(newItemText("😀".repeat(1000), 1000).error, "");
  assert.equal(newItemText("x".repeat(1001), 1000).error, "The new item is 1001 characters long; the most is 1000.");
  assert.equal(newItemText("x".repeat(5000), 0).error, ""); // no limit known: the server says
});

test("the plan's Start button is the server's, while the plan waits for it", () => {
  const plan = { items: [{ content: "a", status: "pending" }], view: { start: { id: "pinplan:start:plan-1", label: "Start" } } };
  assert.deepEqual(startButton(plan), { id: "pinplan:start:plan-1", label: "Start" });
  assert.equal(startButton({ ...plan, view: {} }), null);
  assert.equal(startButton(null), null);
});
