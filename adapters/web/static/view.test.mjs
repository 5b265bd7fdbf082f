import { test } from "node:test";
import assert from "node:assert/strict";

import { planTitle, planFooter, planProgress, stopButton, pill, running, cardView, revisionProgress, statusName } from "./view.js";

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
