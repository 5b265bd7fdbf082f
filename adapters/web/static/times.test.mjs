import { test } from "node:test";
import assert from "node:assert/strict";

import { utcClock, utcStamp } from "./times.js";

test("times are shown in UTC, as the footer and the cards show them", () => {
  const ms = Date.UTC(2026, 2, 1, 9, 5, 7, 450);
  assert.equal(utcClock(ms), "09:05:07 UTC");
  assert.equal(utcStamp(ms), "2026-03-01 09:05:07 UTC");
  // Whatever the browser's zone: the same text.
  const before = process.env.TZ;
  process.env.TZ = "Asia/Kolkata";
  try {
    assert.equal(utcClock(ms), "09:05:07 UTC");
  } finally {
    process.env.TZ = before;
  }
});
