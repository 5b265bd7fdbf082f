import { test } from "node:test";
import assert from "node:assert/strict";

import { Timeline, messageKey, cardKey, cardSort } from "./timeline.js";

const msg = (id, sort) => ({ id: messageKey({ id }), sort });

test("a message shows once by its id, however it arrives", () => {
  const tl = new Timeline();
  assert.equal(tl.insert(msg("m-1", 100)), null); // the POST's answer
  assert.equal(tl.insert(msg("m-1", 100)), undefined); // its live event
  assert.equal(tl.insert(msg("m-1", 9000)), undefined); // its stored copy, stamped later
  // The same text sent again is another message: another id.
  assert.equal(tl.insert(msg("m-2", 101)), null);
  assert.deepEqual(tl.items.map((x) => x.id), ["m|m-1", "m|m-2"]);
});

test("items sit in time order; a decided card moves to where it was decided", () => {
  const tl = new Timeline([msg("a", 10), msg("c", 30)]);
  const card = { id: cardKey({ id: "k" }), sort: cardSort({ id: "k" }) }; // open: at the end
  assert.equal(card.sort, Infinity);
  assert.equal(tl.insert(card), null);
  const b = msg("b", 20);
  assert.equal(tl.insert(b).id, "m|c"); // goes before c
  assert.equal(tl.move(card, cardSort({ id: "k", outcome: "Allowed once", at: "1970-01-01T00:00:00.025Z" })).id, "m|c");
  assert.deepEqual(tl.items.map((x) => x.id), ["m|a", "m|b", "c|k", "m|c"]);
  tl.reset([msg("z", 5), msg("z", 6), msg("y", 1)]);
  assert.deepEqual(tl.items.map((x) => [x.id, x.sort]), [["m|y", 1], ["m|z", 5]]);
});

test("a live answer's message is taken out for the stored one that replaces it", () => {
  const tl = new Timeline([msg("m-1", 10), msg("live-a", 20)]);
  const live = tl.remove(messageKey({ id: "live-a" }));
  assert.equal(live.id, "m|live-a");
  assert.equal(tl.remove(messageKey({ id: "live-a" })), undefined); // once
  assert.equal(tl.insert(msg("m-2", 25)), null);
  assert.deepEqual(tl.items.map((x) => x.id), ["m|m-1", "m|m-2"]);
});
