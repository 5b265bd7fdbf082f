// The plan's revision history as a diff. Pure: no DOM.

// diffItems lists what changed between two revisions' items: added,
// removed, and status changes, matched by content (each item of before
// matches at most one of after).
export function diffItems(before, after) {
  const left = (before || []).map((it) => ({ ...it, used: false }));
  const changes = [];
  for (const it of after || []) {
    const match = left.find((x) => !x.used && x.content === it.content);
    if (!match) { changes.push({ kind: "added", item: it }); continue; }
    match.used = true;
    if (match.status !== it.status) changes.push({ kind: "changed", item: it, from: match.status });
  }
  for (const x of left) {
    if (!x.used) changes.push({ kind: "removed", item: { content: x.content, status: x.status } });
  }
  return changes;
}

// evidenceChanges lists the items whose evidence line (the server's, in
// each revision's view) is not what it was in the revision before, matched
// by content as the bot attributes calls: each with its line as of after.
export function evidenceChanges(before, after) {
  const was = new Map();
  ((before && before.items) || []).forEach((it, i) => { if (!was.has(it.content)) was.set(it.content, lineOf(before, i)); });
  const seen = new Set();
  const out = [];
  ((after && after.items) || []).forEach((it, i) => {
    const line = lineOf(after, i);
    if (!line || seen.has(it.content) || line === (was.get(it.content) || "")) return;
    seen.add(it.content);
    out.push({ content: it.content, evidence: line });
  });
  return out;
}

function lineOf(rev, i) {
  const v = rev.view && rev.view.items && rev.view.items[i];
  return (v && v.evidence) || "";
}

// diffHistory is what the revision history lists, newest first: each revision with
// what changed since the one before it (the first adds every item), and
// the evidence lines that changed with it.
export function diffHistory(revs) {
  const out = [];
  let prev = null;
  for (const rev of revs || []) {
    out.push({ rev, first: !prev, changes: diffItems(prev ? prev.items : [], rev.items), evidence: evidenceChanges(prev, rev) });
    prev = rev;
  }
  return out.reverse();
}
