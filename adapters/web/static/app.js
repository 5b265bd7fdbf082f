// pinplan console, the main module: it wires the page's DOM to the API
// and the event stream. The rules it keeps live in their own modules, which
// never touch the DOM on import (node --test runs them):
//   - replay.js: every event and every fetched thread carries a sequence
//     number, increasing per thread; the page never applies one older than what it
//     shows. While a thread is being fetched its events are held back and
//     replayed on top of the answer, so the live echo and the load cannot
//     race. On every (re)connect of the event stream the list and the open
//     thread are fetched again (resync).
//   - timeline.js: each message shows once, by the id the server gives it.
//   - view.js: the plan's title and footer, each item's evidence line
//     and controls (Skip, Reopen, Add: which ones, their labels and the
//     ids they send), the card's words and buttons and the pills'
//     classes are the server's, rendered by chat.
//   - markdown.js: model text is never parsed as HTML.
//   - plandiff.js: the revision history's diff.

import { api, threadPath } from "./api.js";
import { $, el, timeEl, setTime, refreshTimes } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { diffHistory } from "./plandiff.js";
import { ThreadReplay, ListSeqs, mergeList, olderPlan } from "./replay.js";
import { later, timeOf, utcClock, utcStamp } from "./times.js";
import { Timeline, messageKey, cardKey, cardSort } from "./timeline.js";
import { planTitle, planFooter, planProgress, stopButton, startButton, pill, running, cardView, revisionProgress, statusName, itemEvidence, itemMark, planAccent, itemControls, itemStruck, findControl, newItemText, revisionChange } from "./view.js";

const phone = window.matchMedia("(max-width: 700px)");

const app = {
  marks: { pending: "⬜", in_progress: "🔄", completed: "✅" }, // replaced by /api/info
  names: { pending: "pending", in_progress: "in progress", completed: "completed" }, // replaced by /api/info
  threads: new Map(),   // thread key → Summary (plus unread)
  listSeqs: new ListSeqs(), // thread key → newest seq applied to the list
  listToken: 0,         // the newest list fetch; older answers are dropped
  createdAt: new Map(), // thread key → performance.now() when created here
  deletedKeys: new Set(),
  view: null,           // the open thread, see openThread
  conn: "connecting",   // connecting | live | down
  sending: false,
  drafts: new Map(),    // thread id ("" for a new thread) → unsent text
  attached: [],         // File objects waiting in the composer for the next send
  fileBytes: 262144,    // PINPLAN_FILE_BYTES, replaced by /api/info: larger files go by name and size only
  itemChars: 1000,      // the longest new plan item, replaced by /api/info
  addDrafts: new Map(), // thread key and plan item text (draftKey) → a new item sent to follow it, kept in case it was refused
};

// ---------------------------------------------------------------- helpers

function keyFor(id) {
  for (const t of app.threads.values()) if (t.id === id) return t.key;
  return id.includes("~") ? id.replaceAll("~", "/") : `web/${id}`;
}

function summaryById(id) {
  for (const t of app.threads.values()) if (t.id === id) return t;
  return null;
}

// setPill shows a summary's status pill: the server's words and class.
function setPill(p, s) {
  const { text, cls } = pill(s);
  p.textContent = text;
  p.dataset.status = text;
  p.className = `pill ${cls}`;
  p.hidden = !text;
}

// ---------------------------------------------------------------- thread list

let listTimer = 0;
function scheduleListFetch() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => loadList(false), 80);
}

async function loadList(resync) {
  const token = ++app.listToken;
  const started = performance.now();
  let list;
  try {
    list = await api("/api/threads");
  } catch {
    return; // the next (re)connect fetches it again
  }
  if (token !== app.listToken || !Array.isArray(list)) return;
  app.threads = mergeList({ old: app.threads, list, seqs: app.listSeqs, resync, deleted: app.deletedKeys, created: app.createdAt, started });
  const v = app.view;
  if (v && v.replay.loaded) {
    const s = app.threads.get(v.key);
    if (s && s.title) setTitle(s.title);
    if (s) setUsage(s.usage_text);
  }
  renderList();
  document.body.dataset.ready = "1";
  loadUsage();
}

// setUsage shows what the open thread's session used (the server's words).
function setUsage(text) {
  $("usage").textContent = text || "";
  $("usage").hidden = !text;
}

// loadUsage lists who used how many tokens today (UTC), after the list.
async function loadUsage() {
  let u;
  try {
    u = await api("/api/usage");
  } catch {
    return;
  }
  if (!u) return;
  const people = Array.isArray(u.people) ? u.people : [];
  $("usage-list").replaceChildren(...people.map((p) => {
    const li = el("li");
    li.append(el("span", "person", p.name ? `${p.name} (${p.person})` : p.person), el("span", "muted", p.text));
    return li;
  }));
  $("usage-note").textContent = u.budget > 0 ? `UTC day ${u.day}; each person's budget resets at 00:00 UTC.` : `UTC day ${u.day}.`;
  $("usage-today").hidden = people.length === 0;
}

// A thread with no time yet has just been created: it sorts on top.
function sortTime(t) {
  const ms = timeOf(t.updated);
  return Number.isNaN(ms) ? Number.MAX_SAFE_INTEGER : ms;
}

function sortedThreads() {
  return [...app.threads.values()].sort((a, b) => sortTime(b) - sortTime(a) || a.key.localeCompare(b.key));
}

const rows = new Map(); // thread key → its <li>

function renderList() {
  const ul = $("thread-list");
  const list = sortedThreads();
  for (const [key, li] of rows) {
    if (!app.threads.has(key)) { li.remove(); rows.delete(key); }
  }
  list.forEach((t, i) => {
    let li = rows.get(t.key);
    if (!li) { li = buildRow(t); rows.set(t.key, li); }
    updateRow(li, t);
    if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null);
  });
  $("threads-empty").hidden = list.length > 0;
}

function buildRow(t) {
  const li = el("li", "thread-row");
  li.dataset.key = t.key;
  const a = el("a", "thread-link");
  const top = el("span", "row-top");
  const title = el("span", "title");
  const unread = el("span", "unread");
  unread.title = "new messages";
  unread.hidden = true;
  top.append(title, unread);
  const meta = el("span", "row-meta");
  const pill = el("span", "pill");
  meta.append(pill, el("span", "progress"), el("span", "platform"), timeEl(t.updated));
  a.append(top, meta);
  li.classList.toggle("web", t.platform === "web");
  a.addEventListener("click", () => closeDrawer());
  li.append(a);
  if (t.platform === "web") {
    const actions = el("div", "row-actions");
    const rename = el("button", "icon-button rename");
    rename.type = "button";
    rename.append(el("span", "", "✎"));
    rename.addEventListener("click", () => startRename(li.dataset.key));
    const del = el("button", "icon-button delete");
    del.type = "button";
    del.append(el("span", "", "🗑"));
    del.addEventListener("click", () => confirmDelete(li.dataset.key));
    actions.append(rename, del);
    li.append(actions);
  }
  return li;
}

function updateRow(li, t) {
  const current = app.view && app.view.key === t.key;
  li.dataset.id = t.id;
  li.classList.toggle("current", current);
  const a = li.querySelector(".thread-link");
  a.href = `#${t.id}`;
  if (current) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  const name = t.title || t.key;
  if (!li.classList.contains("editing")) li.querySelector(".title").textContent = name;
  li.querySelector(".unread").hidden = !t.unread || current;
  setTime(li.querySelector(".when"), t.updated);
  const platform = li.querySelector(".platform");
  platform.textContent = t.platform === "web" ? "" : t.platform; // web is the default: only others are named
  platform.hidden = t.platform === "web";
  setPill(li.querySelector(".pill"), t);
  li.querySelector(".progress").textContent = planProgress(t.plan);
  const rename = li.querySelector(".rename");
  if (rename) {
    rename.setAttribute("aria-label", `Rename “${name}”`);
    rename.title = "Rename";
    li.querySelector(".delete").setAttribute("aria-label", `Delete “${name}”`);
    li.querySelector(".delete").title = "Delete";
  }
}

// touchList applies an event to the list entry of its thread.
function touchList(e, apply) {
  const t = app.threads.get(e.thread);
  if (!t) {
    scheduleListFetch(); // a thread the page has not seen yet
    return;
  }
  if (!app.listSeqs.admit(e.thread, e.seq)) return;
  if (typeof e.seq === "number") t.seq = e.seq;
  apply(t);
  renderList();
}

function startRename(key) {
  const t = app.threads.get(key);
  const li = rows.get(key);
  if (!t || !li || li.classList.contains("editing")) return;
  li.classList.add("editing");
  const input = el("input", "rename-input");
  input.type = "text";
  input.value = t.title || "";
  input.maxLength = 200;
  input.setAttribute("aria-label", "Thread title");
  const form = el("form", "rename-form");
  form.append(input);
  li.querySelector(".thread-link").hidden = true;
  li.insertBefore(form, li.firstChild);
  input.focus();
  input.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const value = input.value.trim();
    form.remove();
    li.querySelector(".thread-link").hidden = false;
    li.classList.remove("editing");
    if (save && value && value !== t.title) {
      const before = t.title;
      t.title = value; // shown at once, put back if the server refuses
      renderList();
      if (app.view && app.view.key === key) setTitle(value);
      try {
        const res = await api(threadPath(t.id), "PATCH", { title: value });
        if (res && res.thread) t.title = res.thread.title;
      } catch (e) {
        t.title = before;
        toast(`Could not rename the thread: ${e.message}`);
      }
      const cur = app.threads.get(key);
      if (cur && cur !== t) cur.title = t.title; // the list was fetched again meanwhile
      if (app.view && app.view.key === key) setTitle(t.title || key);
    }
    renderList();
    li.querySelector(".rename")?.focus();
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); finish(true); });
  input.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.preventDefault(); finish(false); } });
  input.addEventListener("blur", () => finish(true));
}

function confirmDelete(key) {
  const t = app.threads.get(key);
  if (!t) return;
  const dlg = $("confirm-delete");
  $("confirm-delete-text").textContent = `“${t.title || t.key}” leaves the list and its session is archived. This cannot be undone here.`;
  dlg.returnValue = "";
  dlg.onclose = async () => {
    if (dlg.returnValue !== "delete") return;
    try {
      await api(threadPath(t.id), "DELETE");
    } catch (e) {
      if (e.status !== 404) { toast(`Could not delete the thread: ${e.message}`); return; }
    }
    app.deletedKeys.add(key);
    app.threads.delete(key);
    renderList();
    if (app.view && app.view.key === key) navigate("");
  };
  dlg.showModal();
}

// toast is a short note at the composer, for errors outside a send.
function toast(text) {
  showSendError(text);
}

// ---------------------------------------------------------------- the open thread

// A view is the open thread: its id and key, its live state (replay.js)
// and its timeline.
function openThread(id, seed) {
  saveDraft();
  closeDrawer();
  const summary = (seed && seed.thread) || (id ? summaryById(id) : null);
  const v = id ? { id, key: summary ? summary.key : keyFor(id), platform: summary ? summary.platform : "web", replay: new ThreadReplay(), timeline: new Timeline(), summary: summary ? { ...summary } : null, historyToken: 0 } : null;
  app.view = v;
  document.body.dataset.loading = "0";
  $("messages").replaceChildren();
  $("load-error").hidden = true;
  hideSendError();
  renderPlan(null);
  resetHistory();
  restoreDraft(id);
  setUsage(summary && summary.usage_text);
  $("intro").hidden = !!id;
  if (!v) {
    setTitle("New thread");
    renderStatus();
    updateComposer();
    renderList();
    return;
  }
  setTitle(summary ? summary.title || summary.key : "Loading…");
  if (seed && seed.thread) {
    v.replay.seed(seed.thread.seq);
    if (seed.thread.plan) renderPlan(seed.thread.plan);
    if (seed.message) addMessage(seed.message, v);
  }
  renderStatus();
  updateComposer();
  renderList();
  loadView(false);
}

async function loadView(resync) {
  const v = app.view;
  if (!v) return;
  const token = v.replay.begin(resync);
  document.body.dataset.loading = "1";
  let data;
  try {
    data = await api(threadPath(v.id));
  } catch (e) {
    if (app.view !== v) return;
    const events = v.replay.failed(token);
    if (!events) return; // a newer fetch runs
    document.body.dataset.loading = "0";
    if (e.status === 404) {
      v.missing = true;
      v.timeline = new Timeline();
      $("messages").replaceChildren();
      renderPlan(null);
      setTitle("Thread not found");
      $("load-error").textContent = "There is no thread at this address. It may have been deleted. Start a new one or pick one from the list.";
      $("load-error").hidden = false;
      v.summary = null;
      renderStatus();
      updateComposer();
    } else if (e.status !== 401) {
      $("load-error").textContent = `Could not load this thread: ${e.message} It loads again when pinplan is reachable.`;
      $("load-error").hidden = false;
    }
    for (const ev of events) applyToView(v, ev);
    return;
  }
  if (app.view !== v) return; // another thread
  const seq = typeof data.seq === "number" ? data.seq : data.thread && typeof data.thread.seq === "number" ? data.thread.seq : -1;
  const res = v.replay.answer(token, seq);
  if (!res) return; // a newer fetch runs
  document.body.dataset.loading = "0";
  if (res.show) {
    v.missing = false;
    v.key = data.thread.key;
    v.platform = data.thread.platform;
    v.summary = { ...data.thread };
    $("load-error").hidden = true;
    setTitle(data.thread.title || data.thread.key);
    setUsage(data.thread.usage_text);
    renderPlan(data.thread.plan);
    setTimeline(data.messages || [], data.cards || []);
    renderStatus();
    updateComposer();
    const s = app.threads.get(v.key);
    if (s) { s.unread = false; renderList(); }
  }
  for (const ev of res.events) applyToView(v, ev);
}

function setTitle(text) {
  $("thread-title").textContent = text;
  document.title = app.view ? `${text} · pinplan` : "pinplan console";
}

function renderStatus() {
  const v = app.view;
  const s = v && v.summary;
  setPill($("status"), s);
  setPill($("plan-status"), s);
  $("working").hidden = !running(s);
  document.body.dataset.state = s ? s.state || "" : "";
}

function updateComposer() {
  const v = app.view;
  const readOnly = !!v && v.platform !== "web";
  $("send").hidden = readOnly;
  $("readonly").hidden = !readOnly;
  const btn = $("send-button");
  btn.disabled = app.sending || app.conn === "down" || (!!v && v.missing);
  btn.textContent = app.sending ? "Sending…" : "Send";
  $("text").readOnly = app.sending;
  $("send").setAttribute("aria-busy", String(app.sending));
}

// ---- timeline: messages and approval cards, in time order, each once

// place shows item where the timeline puts it; false if it is shown.
function place(v, item) {
  const before = v.timeline.insert(item);
  if (before === undefined) return false;
  $("messages").insertBefore(item.el, before ? before.el : null);
  return true;
}

// addMessage shows m once (by its id), in time order.
function addMessage(m, v = app.view) {
  if (!v) return;
  const id = messageKey(m);
  if (v.timeline.has(id)) return; // shown already
  let at = Date.parse(m.at);
  if (Number.isNaN(at)) at = Date.now();
  place(v, { id, sort: at, el: messageEl(m) });
  stickToBottom(m.role === "user");
}

// upsertLive shows an answer as the model writes it: one message, its
// text replaced by each live event's (the text so far).
function upsertLive(m, v = app.view) {
  if (!v) return;
  const old = v.timeline.get(messageKey(m));
  if (!old) {
    addMessage(m, v);
    return;
  }
  old.el.querySelector(".body").replaceChildren(renderMarkdown(m.text, document));
  stickToBottom(false);
}

// dropMessage takes message id out of the timeline (a live answer its
// stored one replaces).
function dropMessage(id, v = app.view) {
  const item = v.timeline.remove(messageKey({ id }));
  if (item) item.el.remove();
}

function messageEl(m) {
  const li = el("li", `msg ${m.role}`);
  const head = el("div", "msg-head");
  const who = m.role === "user" ? m.author || "you" : m.role === "notice" ? "note" : "pinplan";
  head.append(el("span", "who", who));
  if (m.at) head.append(timeEl(m.at));
  const body = el("div", "body");
  if (m.role === "user") {
    body.classList.add("plain");
    body.textContent = m.text; // what the user typed, as typed
  } else {
    body.append(renderMarkdown(m.text, document));
  }
  li.append(head, body);
  if (m.files && m.files.length) {
    const ul = el("ul", "files");
    ul.setAttribute("aria-label", "Files");
    for (const f of m.files) ul.append(el("li", "", `📄 ${f.name} · ${sizeText(f.size)}`));
    li.append(ul);
  }
  return li;
}

// sizeText says a file's size for a person: 12 bytes, 3 KiB, 1.5 MiB.
function sizeText(n) {
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${Math.round(n / (1 << 10))} KiB`;
  return `${n} bytes`;
}

// ---- attached files: the attach button, or files dropped on the composer

// maxAttach is the most files a message takes (the server's limit).
const maxAttach = 10;

function attach(list) {
  for (const f of list) {
    if (app.attached.length >= maxAttach) {
      showSendError(`A message takes at most ${maxAttach} files.`);
      break;
    }
    app.attached.push(f);
  }
  renderAttached();
}

function renderAttached() {
  const ul = $("attached");
  ul.replaceChildren();
  app.attached.forEach((f, i) => {
    const li = el("li", "", `📄 ${f.name} · ${sizeText(f.size)}`);
    const rm = el("button", "", "×");
    rm.type = "button";
    rm.setAttribute("aria-label", `Remove ${f.name}`);
    rm.addEventListener("click", () => { app.attached.splice(i, 1); renderAttached(); });
    li.append(rm);
    ul.append(li);
  });
  ul.hidden = app.attached.length === 0;
}

// encodeFile reads a file for the API: its name, type and bytes in
// base64; a file over the limit the model is given goes by its size alone
// (it would be described, and its bytes could pass the request's size).
async function encodeFile(f) {
  if (f.size > app.fileBytes) return { name: f.name, type: f.type, size: f.size };
  const bytes = new Uint8Array(await f.arrayBuffer());
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return { name: f.name, type: f.type, data: btoa(bin) };
}

function upsertCard(card, v = app.view) {
  if (!v) return;
  const id = cardKey(card);
  const old = v.timeline.get(id);
  if (old) {
    fillCard(old.el, card);
    // Decided, it sits where it was decided: before the answer that
    // followed, not after it.
    const sort = cardSort(card);
    if (sort !== old.sort) {
      const before = v.timeline.move(old, sort);
      $("messages").insertBefore(old.el, before ? before.el : null);
    }
    return;
  }
  const li = el("li", "card");
  li.dataset.card = card.id;
  fillCard(li, card);
  place(v, { id, sort: cardSort(card), el: li });
  stickToBottom();
}

// fillCard shows a card as the server words it.
function fillCard(li, card) {
  const view = cardView(card);
  const head = el("div", "card-head");
  head.append(el("span", "card-icon", "🔐"));
  head.append(el("strong", "card-title", view.title));
  const pre = el("pre", "args");
  let args = card.arguments || "";
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* cut at 1,000 characters: shown as sent */ }
  pre.append(el("code", "", args));
  const status = el("p", "status", view.status);
  li.className = `card ${view.cls}`;
  if (card.outcome) li.dataset.outcome = card.outcome; else delete li.dataset.outcome;
  li.replaceChildren(head, pre, status);
  if (view.buttons.length && app.view && app.view.platform === "web") {
    const row = el("div", "buttons");
    for (const b of view.buttons) {
      const button = el("button", `${b.action} ${b.style}`, b.label);
      button.type = "button";
      button.addEventListener("click", () => press(b.id, row));
      row.append(button);
    }
    li.append(row);
  }
}

function setTimeline(messages, cards) {
  const v = app.view;
  const old = new Map(v.timeline.items.map((x) => [x.id, x]));
  const items = v.timeline.items.filter((x) => x.local);
  for (const m of messages) {
    const id = messageKey(m);
    const sort = Date.parse(m.at);
    items.push({ id, sort: Number.isNaN(sort) ? 0 : sort, el: old.has(id) ? old.get(id).el : messageEl(m) });
  }
  for (const card of cards) {
    const id = cardKey(card);
    const li = old.has(id) ? old.get(id).el : el("li", "card");
    li.dataset.card = card.id;
    fillCard(li, card);
    items.push({ id, sort: cardSort(card), el: li });
  }
  v.timeline.reset(items);
  $("messages").replaceChildren(...v.timeline.items.map((x) => x.el));
  stickToBottom(true);
}

function addLocalNote(text) {
  const v = app.view;
  if (!v) return;
  const m = { role: "notice", text, at: new Date().toISOString() };
  place(v, { id: `l|${Math.random()}`, sort: Date.now(), el: messageEl(m), local: true });
  stickToBottom(true);
}

let wasAtBottom = true;
function stickToBottom(force) {
  const s = $("scroller");
  if (force || wasAtBottom) requestAnimationFrame(() => { s.scrollTop = s.scrollHeight; });
}

// ---- the plan

let shownPlan = null;

function renderPlan(plan) {
  shownPlan = plan || null;
  const box = $("plan");
  document.body.classList.toggle("has-plan", !!(plan && plan.items && plan.items.length));
  if (!plan || !plan.items || plan.items.length === 0) {
    adding = null;
    showPlanNote("");
    box.hidden = true;
    delete box.dataset.revision;
    delete box.dataset.state;
    delete box.dataset.accent;
    $("plan-items").replaceChildren(); // so no opened item carries over to another plan
    return;
  }
  $("plan-title").textContent = planTitle(plan);
  // Items whose calls are open stay open across revisions, and so does
  // an Add form being typed in, with its caret.
  const open = new Set([...document.querySelectorAll("#plan-items details.evidence[open]")].map((d) => d.dataset.item));
  const typing = adding && document.activeElement === adding.input ? { start: adding.input.selectionStart, end: adding.input.selectionEnd } : null;
  const web = !!app.view && app.view.platform === "web"; // another platform's thread is shown read-only
  $("plan-items").replaceChildren(...plan.items.map((it, i) => {
    const li = el("li", it.status);
    li.dataset.status = it.status;
    li.dataset.item = it.content;
    const mark = el("span", "mark", itemMark(plan, i, app.marks));
    mark.setAttribute("role", "img");
    mark.setAttribute("aria-label", statusName(app.names, it.status));
    const body = el("div", "item");
    body.append(el(itemStruck(plan, i) ? "s" : it.status === "in_progress" ? "strong" : "span", "text", it.content));
    const ev = itemEvidence(plan, i);
    if (ev.line) body.append(evidenceEl(it, ev, open.has(it.content)));
    li.append(mark, body);
    const controls = web ? itemControls(plan, i) : [];
    if (controls.length) li.append(controlsEl(it, controls));
    return li;
  }));
  keepAdd(plan, typing);
  $("plan-footer").textContent = planFooter(plan);
  const stop = stopButton(plan);
  const btn = $("stop");
  btn.hidden = !stop || !app.view || app.view.platform !== "web";
  if (stop) {
    btn.textContent = stop.label;
    btn.dataset.button = stop.id;
  }
  const start = web ? startButton(plan) : null;
  $("start").hidden = $("change").hidden = !start;
  if (start) {
    $("start").textContent = start.label;
    $("start").dataset.button = start.id;
  }
  box.dataset.revision = String(plan.revision);
  box.dataset.state = plan.state || "";
  box.dataset.accent = planAccent(plan); // the border's colour
  box.hidden = false;
  const v = app.view;
  if (v && historyOpen() && plan.revision > (v.historyRevision ?? -1)) scheduleHistory();
}

// evidenceEl is an item's evidence line (DESIGN §15); with calls behind
// it, the summary of a <details> that lists them when opened (built on
// the first opening: a plan can hold 2,500 of them).
function evidenceEl(it, ev, open) {
  if (ev.calls.length === 0) return el("p", "evidence", ev.line);
  const d = el("details", "evidence");
  d.dataset.item = it.content;
  d.append(el("summary", "", ev.line));
  const list = el("ol", "calls");
  d.append(list);
  const fill = () => {
    if (!d.open || list.childElementCount) return;
    list.append(...ev.calls.map(callEl));
    if (ev.more > 0) list.append(el("li", "call more", `… and ${ev.more} more call${ev.more === 1 ? "" : "s"}, counted but not kept`));
  };
  d.addEventListener("toggle", fill);
  d.open = open;
  fill();
  return d;
}

// ---- steering the plan (DESIGN §19): an item's controls, as chat offers them

// controlsEl is an item's controls: Skip and Reopen send at once; Add
// opens a field under the item for the new item's text.
function controlsEl(it, controls) {
  const row = el("div", "item-controls");
  for (const c of controls) {
    const b = el("button", `${c.action} ${c.style || "secondary"} small`, c.label);
    b.type = "button";
    b.setAttribute("aria-label", `${c.label} “${it.content}”`);
    if (c.action === "add") {
      b.setAttribute("aria-expanded", String(!!adding && adding.item === it.content));
      b.addEventListener("click", () => openAdd(it.content));
    } else {
      b.addEventListener("click", () => press(c.id, row, { note: showPlanNote }));
    }
    row.append(b);
  }
  return row;
}

// planRow is the shown plan's row of the item whose text is content.
function planRow(content) {
  return [...$("plan-items").children].find((li) => li.dataset.item === content) || null;
}

// adding is the open Add form: the item it adds after (by its text) and
// its elements. The plan's rows are built anew on every revision; the
// form moves to its item's new row (keepAdd), so what is typed stays.
let adding = null;

function openAdd(item) {
  const li = planRow(item);
  if (!li) return;
  if (adding && adding.item === item) { adding.input.focus(); return; }
  closeAdd(false);
  const form = el("form", "add-item");
  const input = el("input", "add-input");
  input.type = "text";
  input.autocomplete = "off";
  input.placeholder = "New item";
  input.setAttribute("aria-label", `New item after “${item}”`);
  // A new item sent before, whose answer was a refusal, comes back.
  const draft = app.addDrafts.get(draftKey(item)) || "";
  if (shownPlan && shownPlan.items.some((it) => it.content === draft)) app.addDrafts.delete(draftKey(item));
  else input.value = draft;
  const submit = el("button", "primary small", "Add");
  submit.type = "submit";
  const cancel = el("button", "secondary small", "Cancel");
  cancel.type = "button";
  const error = el("p", "add-error");
  error.setAttribute("role", "alert");
  error.hidden = true;
  const row = el("div", "add-row");
  row.append(input, submit, cancel);
  form.append(row, error);
  adding = { item, form, input, error, busy: false };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); submitAdd(); }); // Enter in the field, or Add
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") { ev.preventDefault(); ev.stopPropagation(); closeAdd(true); }
  });
  input.addEventListener("input", () => { if (adding && adding.input === input) error.hidden = true; });
  cancel.addEventListener("click", () => closeAdd(true));
  li.append(form); // under the item and its controls
  li.querySelector("button.add")?.setAttribute("aria-expanded", "true");
  form.scrollIntoView({ block: "nearest" });
  input.focus();
}

// closeAdd takes the Add form away; refocus puts the focus back on its
// item's Add button.
function closeAdd(refocus) {
  const a = adding;
  if (!a) return;
  adding = null;
  a.form.remove();
  const li = planRow(a.item);
  const button = li && li.querySelector("button.add");
  if (button) {
    button.setAttribute("aria-expanded", "false");
    if (refocus) button.focus();
  }
}

// keepAdd puts the open Add form under its item in the plan just
// rendered, with the caret where it was; when the item left the plan (or
// may no longer get one after it) the form goes, and the plan says so.
function keepAdd(plan, typing) {
  const a = adding;
  if (!a) return;
  const li = planRow(a.item);
  if (!li || !findControl(plan, a.item, "add") || !(app.view && app.view.platform === "web")) {
    adding = null;
    const text = a.input.value.trim();
    if (text) showPlanNote(`“${a.item}” left the plan, so nothing was added after it. You had typed: “${text}”`);
    return;
  }
  li.append(a.form);
  li.querySelector("button.add")?.setAttribute("aria-expanded", "true");
  if (typing) {
    a.input.focus();
    a.input.setSelectionRange(typing.start, typing.end);
  }
}

// submitAdd sends the new item with its item's Add control as the plan
// shows it now. The form stays open on an error; the server's answer
// (taken, or why not) shows by the plan.
async function submitAdd() {
  const a = adding;
  if (!a || a.busy) return;
  const { text, error } = newItemText(a.input.value, app.itemChars);
  const control = findControl(shownPlan, a.item, "add");
  if (error || !control) {
    a.error.textContent = error || "That item may no longer get one after it.";
    a.error.hidden = false;
    a.input.focus();
    return;
  }
  a.busy = true;
  a.input.readOnly = true;
  const answered = await press(control.id, a.form, { text, note: showPlanNote });
  a.busy = false;
  a.input.readOnly = false;
  if (adding !== a) return;
  if (!answered) { a.input.focus(); return; }
  app.addDrafts.set(draftKey(a.item), text);
  closeAdd(true);
}

// draftKey is where app.addDrafts keeps a new item sent after item in
// the open thread.
function draftKey(item) {
  return `${app.view ? app.view.key : ""}\u0000${item}`;
}

// showPlanNote shows what a press of an item's control did (or why it
// did nothing), for this person alone, by the plan for a few seconds.
let planNoteTimer = 0;
function showPlanNote(text) {
  const p = $("plan-note");
  clearTimeout(planNoteTimer);
  p.textContent = text;
  p.title = text; // whole, where a phone shows two lines of it
  p.hidden = !text;
  $("plan").classList.toggle("noting", !!text);
  if (text) planNoteTimer = setTimeout(() => showPlanNote(""), 12000);
}

// callEl is one call: tool, server, outcome, who decided its card, when
// it started and how long it took; its arguments under it.
function callEl(c) {
  const li = el("li", c.failed ? "call failed" : "call");
  li.dataset.outcome = c.outcome;
  const head = el("div", "call-head");
  head.append(el("strong", "tool", c.tool));
  for (const part of [c.server, c.outcome, c.approver]) {
    if (part) head.append(document.createTextNode(" · "), el("span", part === c.outcome ? "outcome" : "", part));
  }
  const ms = timeOf(c.start);
  if (!Number.isNaN(ms)) {
    // UTC, as the footer and the cards say it.
    const t = el("time", "when", utcClock(ms));
    t.dateTime = new Date(ms).toISOString();
    t.title = utcStamp(ms);
    head.append(document.createTextNode(" · "), t);
  }
  if (c.took) head.append(document.createTextNode(` · ${c.took}`));
  li.append(head);
  if (c.args) li.append(el("code", "args", c.args));
  return li;
}

// ---- revision history, per thread

let historyTimer = 0;
function resetHistory() {
  clearTimeout(historyTimer);
  $("plan-revisions").replaceChildren();
  $("plan-history-note").hidden = true;
  if (historyOpen() && app.view) scheduleHistory(0);
}

// historyOpen reports whether the revision history is shown (a panel of
// its own, not part of the plan's box).
function historyOpen() {
  return !$("plan-history").hidden;
}

function showHistory(open) {
  $("plan-history").hidden = !open;
  document.body.classList.toggle("history-open", open);
  $("plan-history-toggle").setAttribute("aria-expanded", String(open));
  if (open) scheduleHistory(0);
}

function scheduleHistory(delay = 120) {
  clearTimeout(historyTimer);
  historyTimer = setTimeout(loadHistory, delay);
}

async function loadHistory() {
  const v = app.view;
  if (!v || !historyOpen()) return;
  const token = ++v.historyToken;
  let revs;
  try {
    revs = await api(`${threadPath(v.id)}/plans`);
  } catch (e) {
    if (app.view !== v || token !== v.historyToken) return;
    $("plan-history-note").textContent = `Could not load the history: ${e.message}`;
    $("plan-history-note").hidden = false;
    return;
  }
  if (app.view !== v || token !== v.historyToken || !Array.isArray(revs)) return; // another thread now
  v.historyRevision = revs.length ? revs[revs.length - 1].revision : 0;
  $("plan-history-note").hidden = true;
  renderHistory(revs);
}

function renderHistory(revs) {
  $("plan-revisions").replaceChildren(...diffHistory(revs).map(revisionEl));
}

function revisionEl({ rev, first, changes, evidence }) {
  const li = el("li", "revision");
  li.dataset.revision = String(rev.revision);
  const head = el("div", "rev-head");
  head.append(el("strong", "", `Revision ${rev.revision}`), document.createTextNode(" · "), timeEl(rev.at), document.createTextNode(` · ${revisionProgress(rev)}`));
  li.append(head);
  if (first) li.append(el("p", "rev-note", "Plan created."));
  const change = revisionChange(rev);
  if (change) li.append(el("p", "rev-note change", change));
  if (changes.length === 0) li.append(el("p", "rev-note", "No change to the items."));
  else li.append(diffEl(changes));
  // The evidence by this revision, of the items it changed for.
  if (evidence && evidence.length) {
    const ul = el("ul", "rev-evidence");
    for (const e of evidence) {
      const row = el("li");
      row.append(el("span", "text", e.content), el("span", "evidence", e.evidence));
      ul.append(row);
    }
    li.append(ul);
  }
  return li;
}

function diffEl(changes) {
  const ul = el("ul", "diff");
  for (const c of changes) {
    const row = el("li", c.kind);
    const sign = el("span", "sign", c.kind === "added" ? "+" : c.kind === "removed" ? "−" : "~");
    sign.setAttribute("aria-hidden", "true");
    const what = el("span", "visually-hidden", c.kind === "changed" ? `${statusName(app.names, c.from)} to ${statusName(app.names, c.item.status)}: ` : `${c.kind}: `);
    const marks = el("span", "marks", c.kind === "changed" ? `${app.marks[c.from] || ""}→${app.marks[c.item.status] || ""}` : app.marks[c.item.status] || "");
    marks.setAttribute("aria-hidden", "true");
    row.append(sign, what, marks, el(c.kind === "removed" ? "s" : "span", "text", c.item.content));
    ul.append(row);
  }
  return ul;
}

// ---------------------------------------------------------------- events

function onEvent(e) {
  if (!e || typeof e.type !== "string") return;
  if (e.type === "thread") {
    scheduleListFetch();
    return;
  }
  if (typeof e.thread !== "string") return;
  switch (e.type) {
    case "plan":
      touchList(e, (t) => { t.plan = e.plan; if (e.plan && e.plan.updated) t.updated = later(t.updated, e.plan.updated); });
      break;
    case "state": {
      // The token counter is the store's (the list's usage_text): read
      // again when the open thread's run state changes (a turn starts,
      // waits, ends), whichever replica ran it, so it never stays at
      // the figures the page loaded with.
      const t = app.threads.get(e.thread);
      const changed = !!t && t.status !== e.status;
      touchList(e, (t) => { t.state = e.state; t.status = e.status; t.status_class = e.status_class; });
      if (changed && app.view && app.view.key === e.thread) scheduleListFetch();
      break;
    }
    case "message":
      touchList(e, (t) => {
        if (e.message && e.message.at) t.updated = later(t.updated, e.message.at);
        if (!app.view || app.view.key !== e.thread) t.unread = true;
      });
      break;
    case "card":
      touchList(e, () => {});
      break;
  }
  const v = app.view;
  if (!v || v.key !== e.thread) return;
  for (const ev of v.replay.offer(e)) applyToView(v, ev); // held back while a fetch runs
}

// applyToView applies an event that replay.js let through.
function applyToView(v, e) {
  switch (e.type) {
    case "plan":
      if (v.summary) v.summary.plan = e.plan;
      renderPlan(e.plan);
      break;
    case "message":
      if (e.message) {
        if (e.replaces) dropMessage(e.replaces, v); // the answer, in place of its live text
        addMessage(e.message, v);
      }
      break;
    case "live":
      if (e.message) upsertLive(e.message, v);
      break;
    case "card":
      if (e.card) upsertCard(e.card, v);
      break;
    case "state":
      if (!v.summary) v.summary = { key: v.key, id: v.id };
      v.summary.state = e.state;
      v.summary.status = e.status;
      v.summary.status_class = e.status_class;
      renderStatus();
      break;
  }
}

let es = null;
let retryTimer = 0;
let backoff = 1000;

function connect() {
  clearTimeout(retryTimer);
  if (es) es.close();
  es = new EventSource("/api/events");
  es.onopen = () => {
    backoff = 1000;
    setConn("live");
    resync();
  };
  es.onmessage = (msg) => {
    let e;
    try { e = JSON.parse(msg.data); } catch { return; }
    onEvent(e);
  };
  es.onerror = () => {
    setConn("down");
    if (es.readyState === EventSource.CLOSED) {
      // The browser gives up on an HTTP error (a 503 while shutting down,
      // a 401): try again ourselves, and go to the login page on a 401.
      retryTimer = setTimeout(() => {
        api("/api/info").catch(() => {}).finally(connect);
      }, backoff);
      backoff = Math.min(backoff * 2, 10000);
    }
  };
}

function setConn(c) {
  app.conn = c;
  $("conn").hidden = c !== "down";
  if (c === "live") document.body.dataset.live = "1"; else delete document.body.dataset.live;
  updateComposer();
}

function resync() {
  loadList(true);
  if (app.view) loadView(true);
}

// ---------------------------------------------------------------- sending

function showSendError(text) {
  const p = $("send-error");
  p.textContent = text;
  p.hidden = false;
}

function hideSendError() {
  $("send-error").hidden = true;
  $("send-error").textContent = "";
}

function saveDraft() {
  const id = app.view ? app.view.id : "";
  const text = $("text").value;
  if (text) app.drafts.set(id, text); else app.drafts.delete(id);
}

function restoreDraft(id) {
  $("text").value = app.drafts.get(id || "") || "";
  autosize();
}

async function send() {
  if (app.sending || app.conn === "down") return;
  const v = app.view;
  if (v && v.missing) return;
  const text = $("text").value;
  const attached = app.attached.slice();
  if (!text.trim() && attached.length === 0) {
    showSendError("Type a message first.");
    return;
  }
  hideSendError();
  app.sending = true;
  updateComposer();
  try {
    const body = { text };
    if (attached.length) body.files = await Promise.all(attached.map(encodeFile));
    const sent = () => { app.attached = app.attached.filter((f) => !attached.includes(f)); renderAttached(); };
    if (!v) {
      const res = await api("/api/threads", "POST", body);
      sent();
      app.drafts.delete("");
      $("text").value = "";
      autosize();
      const s = { ...res.thread, unread: false };
      app.threads.set(s.key, s);
      app.createdAt.set(s.key, performance.now());
      app.listSeqs.set(s.key, s.seq);
      navigate(s.id, { thread: s, message: res.message });
    } else {
      const res = await api(`${threadPath(v.id)}/messages`, "POST", body);
      sent();
      if (app.view === v) {
        $("text").value = "";
        autosize();
      }
      app.drafts.delete(v.id);
      if (res && res.message) {
        addMessage(res.message, v);
        if (res.notice) addMessage(res.notice, v);
        const s = app.threads.get(v.key);
        if (s && res.message.at) { s.updated = later(s.updated, res.message.at); renderList(); }
      }
    }
  } catch (e) {
    // The draft stays in the box; say why it was not sent.
    let reason = e.message;
    if (e.status === 0) reason = "pinplan is not reachable, so the message was not sent. It is kept here; send it again when pinplan is back.";
    else if (e.status === 404 && v) reason = "This thread no longer exists, so the message was not sent.";
    showSendError(reason);
  } finally {
    app.sending = false;
    updateComposer();
  }
}

// press sends a card's, the plan's or a plan item's button, with text
// for an item's Add; the answer is the card or plan as it now is, or a
// note for this user only, shown by note (in the thread, or by the plan
// for an item's control). It reports whether the server answered.
async function press(button, row, { text, note = addLocalNote } = {}) {
  const v = app.view;
  if (!v) return false;
  if (row) for (const b of row.querySelectorAll("button")) b.disabled = true;
  try {
    const body = { button };
    if (text !== undefined) body.text = text;
    const res = await api(`${threadPath(v.id)}/click`, "POST", body);
    if (app.view !== v || !res) return true;
    // The answer carries no sequence number, and the plan's live event
    // can overtake it: show it only when it is not older than the shown one.
    if (res.card && !(!res.card.outcome && v.timeline.items.some((x) => x.id === cardKey(res.card) && x.el.dataset.outcome))) upsertCard(res.card, v);
    if (res.plan && !olderPlan(res.plan, shownPlan)) renderPlan(res.plan);
    if (res.private) note(res.private);
    if (row && row.isConnected) for (const b of row.querySelectorAll("button")) b.disabled = false;
    return true;
  } catch (e) {
    if (row && row.isConnected) for (const b of row.querySelectorAll("button")) b.disabled = false;
    note(`That did not work: ${e.message}`);
    return false;
  }
}

function autosize() {
  const ta = $("text");
  ta.style.height = "auto";
  ta.style.height = `${Math.min(ta.scrollHeight + 2, Math.round(window.innerHeight * 0.35))}px`;
}

// ---------------------------------------------------------------- navigation

let navigatingTo = null;
function navigate(id, seed) {
  if (id === (app.view ? app.view.id : "") && !seed) return;
  openThread(id, seed);
  if (location.hash.slice(1) !== id) {
    navigatingTo = id;
    if (id) location.hash = id;
    else window.history.pushState(null, "", location.pathname + location.search);
  }
}

window.addEventListener("hashchange", () => {
  const id = decodeURIComponent(location.hash.slice(1));
  if (navigatingTo === id) { navigatingTo = null; return; }
  navigatingTo = null;
  if (app.view && app.view.id === id) return;
  if (!app.view && !id) return;
  openThread(id);
});
window.addEventListener("popstate", () => {
  const id = decodeURIComponent(location.hash.slice(1));
  if ((app.view ? app.view.id : "") !== id) openThread(id);
});

function openDrawer() {
  document.body.classList.add("drawer-open");
  $("threads-toggle").setAttribute("aria-expanded", "true");
  $("backdrop").hidden = false;
  const focus = $("threads").querySelector(".thread-row.current .thread-link") || $("new-thread");
  focus.focus();
}

function closeDrawer() {
  if (!document.body.classList.contains("drawer-open")) return;
  document.body.classList.remove("drawer-open");
  $("threads-toggle").setAttribute("aria-expanded", "false");
  $("backdrop").hidden = true;
}

// ---------------------------------------------------------------- wiring

$("send").addEventListener("submit", (ev) => {
  ev.preventDefault();
  send();
});
$("attach").addEventListener("click", () => $("files").click());
$("files").addEventListener("change", () => {
  attach($("files").files);
  $("files").value = "";
});
// Files dropped anywhere on the composer are attached.
for (const type of ["dragenter", "dragover"]) {
  $("send").addEventListener(type, (ev) => {
    if (!ev.dataTransfer || !Array.from(ev.dataTransfer.types || []).includes("Files")) return;
    ev.preventDefault();
    $("send").classList.add("dropping");
  });
}
$("send").addEventListener("dragleave", () => $("send").classList.remove("dropping"));
$("send").addEventListener("drop", (ev) => {
  $("send").classList.remove("dropping");
  if (!ev.dataTransfer || !ev.dataTransfer.files.length) return;
  ev.preventDefault();
  attach(ev.dataTransfer.files);
});

// Enter sends and Shift+Enter is a new line. The line break an Enter
// would type is refused in beforeinput too: some keyboards (and DevTools'
// synthetic keys) deliver it even when the keydown was prevented.
let enterSends = false;
$("text").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
    ev.preventDefault();
    enterSends = true;
    send();
  }
});
$("text").addEventListener("beforeinput", (ev) => {
  if (enterSends && (ev.inputType === "insertLineBreak" || ev.inputType === "insertParagraph")) ev.preventDefault();
});
$("text").addEventListener("keyup", (ev) => {
  if (ev.key === "Enter") enterSends = false;
});
$("text").addEventListener("input", () => {
  autosize();
  if (!$("send-error").hidden && $("text").value.trim()) hideSendError();
});

$("scroller").addEventListener("scroll", () => {
  const s = $("scroller");
  wasAtBottom = s.scrollHeight - s.scrollTop - s.clientHeight < 40;
});
// Someone reading the latest message keeps seeing it when the plan above
// grows or the screen turns.
new ResizeObserver(() => {
  if (wasAtBottom) $("scroller").scrollTop = $("scroller").scrollHeight;
}).observe($("scroller"));

$("stop").addEventListener("click", () => { if ($("stop").dataset.button) press($("stop").dataset.button); });
$("start").addEventListener("click", () => { if ($("start").dataset.button) press($("start").dataset.button); });
// Change: the plan is changed with its items' controls; it takes the
// person there.
$("change").addEventListener("click", () => {
  const first = document.querySelector("#plan-items .item-controls button");
  if (first) first.focus();
});
$("plan-history-toggle").addEventListener("click", () => showHistory(!historyOpen()));
$("plan-history-close").addEventListener("click", () => { showHistory(false); $("plan-history-toggle").focus(); });

$("new-thread").addEventListener("click", () => {
  navigate("");
  closeDrawer();
  $("text").focus();
});

$("threads-toggle").addEventListener("click", () => {
  if (document.body.classList.contains("drawer-open")) closeDrawer(); else openDrawer();
});
$("backdrop").addEventListener("click", closeDrawer);
document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && document.body.classList.contains("drawer-open")) {
    closeDrawer();
    $("threads-toggle").focus();
  }
});
phone.addEventListener("change", () => { if (!phone.matches) closeDrawer(); });
window.addEventListener("resize", autosize);

setInterval(refreshTimes, 30000);

api("/api/info").then((info) => {
  if (!info) return;
  if (info.marks) app.marks = info.marks;
  if (info.status_names) app.names = info.status_names;
  if (info.file_bytes) app.fileBytes = info.file_bytes;
  if (info.item_chars) app.itemChars = info.item_chars;
  const mode = $("mode");
  if (info.demo) { mode.textContent = "demo model: scripted, no API key used"; mode.hidden = false; }
  else if (info.model) { mode.textContent = `model: ${info.model}`; mode.hidden = false; }
  else { mode.textContent = "no model configured"; mode.hidden = false; }
}).catch(() => {});

openThread(decodeURIComponent(location.hash.slice(1)));
loadList(false);
connect();
