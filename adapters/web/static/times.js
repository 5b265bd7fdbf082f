// Times as the console shows them. Pure: no DOM.

// timeOf is a time in ms, or NaN for none (missing, or Go's zero time).
export function timeOf(at) {
  const ms = Date.parse(at);
  return ms > Date.UTC(2000, 0, 1) ? ms : NaN;
}

// later is the later of two times; a missing one loses.
export function later(a, b) {
  const x = timeOf(a), y = timeOf(b);
  if (Number.isNaN(y)) return a;
  if (Number.isNaN(x)) return b;
  return x >= y ? a : b;
}

// relative is ms as "just now", "5 min ago", ... as seen at now.
export function relative(ms, now = Date.now()) {
  const s = (now - ms) / 1000;
  if (s < 45) return "just now";
  if (s < 90) return "1 min ago";
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 24) return `${h} h ago`;
  const d = Math.round(h / 24);
  if (d < 7) return `${d} d ago`;
  return new Date(ms).toLocaleDateString();
}

// utcStamp is ms as the footer shows times: "2026-03-01 09:05:07 UTC".
export function utcStamp(ms) {
  return new Date(ms).toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

// utcClock is ms's time of day in UTC, as a card's deadline shows it:
// "09:05:07 UTC".
export function utcClock(ms) {
  return new Date(ms).toISOString().slice(11, 19) + " UTC";
}
