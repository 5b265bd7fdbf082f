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

// diffHistory is what the revision history lists, newest first: each revision with
// what changed since the one before it (the first adds every item).
export function diffHistory(revs) {
  const out = [];
  let prev = null;
  for (const rev of revs || []) {
    out.push({ rev, first: !prev, changes: diffItems(prev ? prev.items : [], rev.items) });
    prev = rev;
  }
  return out.reverse();
}
