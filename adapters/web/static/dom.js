// Small DOM helpers. They use the page's document when called, never on
// import.

import { relative, timeOf, utcStamp } from "./times.js";

export const $ = (id) => document.getElementById(id);

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

// timeEl is a relative time, refreshed every 30 s (refreshTimes), with the
// absolute time in its title, in UTC.
export function timeEl(at, className = "when") {
  const t = el("time", className);
  setTime(t, at);
  return t;
}

export function setTime(t, at) {
  const ms = timeOf(at);
  if (Number.isNaN(ms)) { t.hidden = true; delete t.dataset.at; return; }
  t.hidden = false;
  t.dateTime = new Date(ms).toISOString();
  t.dataset.at = String(ms);
  t.title = utcStamp(ms); // as the footer says times
  t.textContent = relative(ms);
}

export function refreshTimes() {
  for (const t of document.querySelectorAll("time[data-at]")) t.textContent = relative(Number(t.dataset.at));
}
