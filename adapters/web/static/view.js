// The strings and classes the server renders, read for the page. The
// server computes them with chat's own functions (the plan's title and
// footer, the card's title, status and button labels, the pill's class),
// so the console says what Slack and Discord say; this module only picks
// them out, with a plain fallback for an answer without a view. Pure: no
// DOM.

// planTitle is "Plan · 2/5 done".
export function planTitle(plan) {
  return (plan && plan.view && plan.view.title) || "";
}

// planFooter is chat.Plan.Footer: update time, revision and run state.
export function planFooter(plan) {
  return (plan && plan.view && plan.view.footer) || "";
}

// planProgress is "2/5 done" for a plan with items, else "".
export function planProgress(plan) {
  if (!plan || !plan.items || plan.items.length === 0) return "";
  return (plan.view && plan.view.progress) || "";
}

// stopButton is the plan's Stop button while a turn runs, else null.
export function stopButton(plan) {
  return (plan && plan.view && plan.view.stop) || null;
}

// startButton is the plan's Start button while the turn waits for a
// person to start its first plan (DESIGN §19), else null.
export function startButton(plan) {
  return (plan && plan.view && plan.view.start) || null;
}

// pill is a status pill: its text (the server's status) and class.
export function pill(s) {
  const text = (s && typeof s.status === "string" && s.status) || "";
  return { text, cls: text ? (s.status_class || "pill-idle") : "pill-idle" };
}

// running reports whether a turn runs, for the "working…" line: the live
// status decides (the state in a fetched summary is read from the store
// and can lag it); without one, the state.
export function running(s) {
  if (!s) return false;
  return s.status ? s.status_class === "pill-working" : s.state === "running";
}

// cardView is an approval card's title, status line, class (open,
// decided or denied) and buttons.
export function cardView(card) {
  const v = card.view;
  if (v) return { title: v.title || "", status: v.status || "", cls: v.class || (card.outcome ? "decided" : "open"), buttons: v.buttons || [] };
  return { title: card.tool || "", status: card.outcome || "", cls: card.outcome ? "decided" : "open", buttons: [] };
}

// itemEvidence is what the plan shows under item i: the server's line
// (chat.Plan.EvidenceLine: "↳ fs__read_text_file ×2", "" for none) and
// the calls behind it, from the plan's evidence by the item's text, in
// the order they were made, with the count of calls made beyond those
// kept.
export function itemEvidence(plan, i) {
  const it = plan && plan.items ? plan.items[i] : null;
  const v = plan && plan.view && plan.view.items ? plan.view.items[i] : null;
  const ie = (it && plan.evidence && plan.evidence[it.content]) || null;
  return { line: (v && v.evidence) || "", calls: ((ie && ie.calls) || []).map(callView), more: (ie && ie.more) || 0 };
}

// callView is one call as an opened item lists it: tool, server and
// outcome, who decided its card, when it started, how long it took, and
// the start of its arguments.
export function callView(c) {
  const outcome = c.outcome || "";
  let approver = "";
  if (c.approver) approver = `${outcome === "denied" ? "denied" : "allowed"} by ${c.approver}`;
  return { tool: c.tool || "", server: c.server || "", outcome, failed: outcome !== "" && outcome !== "ok", approver, start: c.start, took: duration(c.duration), args: c.args || "" };
}

// duration is a call's duration, Go's nanoseconds, in words: "850 ms",
// "1.2 s", "42 s", "2 min 5 s"; "" for none.
export function duration(ns) {
  if (typeof ns !== "number" || !Number.isFinite(ns) || ns < 0) return "";
  const ms = ns / 1e6;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.floor(s)} s`;
  return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
}

// revisionProgress is a stored revision's "2/5 done".
export function revisionProgress(rev) {
  return (rev && rev.view && rev.view.progress) || "";
}

// revisionChange says who made a stored revision when a person did (a
// Skip, Reopen or Add on the plan): the server's words, "" for the
// agent's revisions.
export function revisionChange(rev) {
  return (rev && rev.view && rev.view.change) || "";
}

// statusName is a plan item's status in words ("in progress"), from
// /api/info's status_names.
export function statusName(names, status) {
  return (names && names[status]) || String(status || "");
}

// itemMark is the mark of plan's item i: the server's (chat.Plan.ItemMark:
// an item left in progress by an ended run is not shown working), else
// its status's from marks.
export function itemMark(plan, i, marks) {
  const v = plan && plan.view && plan.view.items ? plan.view.items[i] : null;
  if (v && v.mark) return v.mark;
  const it = plan && plan.items ? plan.items[i] : null;
  return (it && marks && marks[it.status]) || "•";
}

// planAccent is the run state the plan's border shows: working, waiting,
// done, stopped or failed.
export function planAccent(plan) {
  return (plan && plan.view && plan.view.accent) || "working";
}

// itemControls are the controls chat offers on plan's item i (Skip,
// Reopen, Add an item after), each { id, action, label, style } with the
// id to send; none when the plan offers none (before the agent wrote it,
// a stored revision) or the answer has no view.
export function itemControls(plan, i) {
  const v = plan && plan.view && plan.view.items ? plan.view.items[i] : null;
  return (v && Array.isArray(v.controls) && v.controls) || [];
}

// itemStruck reports whether plan's item i is shown struck through: the
// server's word (done, or skipped by a person), else done.
export function itemStruck(plan, i) {
  const v = plan && plan.view && plan.view.items ? plan.view.items[i] : null;
  if (v && typeof v.struck === "boolean") return v.struck;
  const it = plan && plan.items ? plan.items[i] : null;
  return !!it && it.status === "completed";
}

// findControl is the control that does action to the item whose text is
// content in plan, or null: an open Add form follows its item across
// revisions (a new revision gives the item's controls new ids).
export function findControl(plan, content, action) {
  const items = (plan && plan.items) || [];
  for (let i = 0; i < items.length; i++) {
    if (items[i].content !== content) continue;
    return itemControls(plan, i).find((c) => c.action === action) || null;
  }
  return null;
}

// newItemText checks what was typed for a new item as the server will:
// trimmed, not empty, at most max characters (code points, as the agent
// counts them; max is /api/info's item_chars). It returns the text to
// send, or the reason not to send it.
export function newItemText(raw, max) {
  const text = String(raw || "").trim();
  if (!text) return { text: "", error: "Type the new item first." };
  const n = [...text].length;
  if (max > 0 && n > max) return { text, error: `The new item is ${n} characters long; the most is ${max}.` };
  return { text, error: "" };
}
