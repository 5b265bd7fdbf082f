"use strict";
// pinplan console: threads, messages and the pinned plan, live over
// Server-Sent Events.
//
// State rules the page keeps:
//   - Every event and every fetched thread carries a per-thread sequence
//     number; the page never applies one older than what it already shows.
//     While a thread is being fetched its events are held back and replayed
//     on top of the answer, so the live echo and the load cannot race.
//   - On every (re)connect of the event stream the list and the open thread
//     are fetched again (resync).
//   - Model text is never parsed as HTML: renderMarkdown builds DOM nodes.

const $ = (id) => document.getElementById(id);
const phone = window.matchMedia("(max-width: 700px)");

const app = {
  marks: { pending: "⬜", in_progress: "🔄", completed: "✅" }, // replaced by /api/info
  threads: new Map(),   // thread key → Summary (plus unread)
  listSeq: new Map(),   // thread key → newest seq applied to the list
  listToken: 0,         // the newest list fetch; older answers are dropped
  createdAt: new Map(), // thread key → performance.now() when created here
  deletedKeys: new Set(),
  view: null,           // the open thread, see openThread
  conn: "connecting",   // connecting | live | down
  sending: false,
  drafts: new Map(),    // thread id ("" for a new thread) → unsent text
};

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// api calls the console's JSON API. State-changing calls send JSON from this
// page's own origin, which is what the server requires.
async function api(path, method = "GET", body) {
  const opts = { method, headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET") {
    // The console refuses a state-changing request that is not JSON.
    opts.headers["Content-Type"] = "application/json";
    if (body !== undefined) opts.body = JSON.stringify(body);
  }
  let r;
  try {
    r = await fetch(path, opts);
  } catch {
    throw new ApiError(0, "pinplan is not reachable right now.");
  }
  if (r.status === 401) {
    location.assign("/login");
    throw new ApiError(401, "This console needs its token; sign in again.");
  }
  const raw = await r.text().catch(() => "");
  let data = null;
  if (raw) {
    try { data = JSON.parse(raw); } catch { data = null; }
  }
  if (!r.ok) {
    let reason = data && typeof data.error === "string" ? data.error : "";
    if (!reason) reason = r.status === 413 ? "That message is too large to send." : `The request failed (${r.status} ${r.statusText}).`;
    throw new ApiError(r.status, reason);
  }
  return data;
}

const threadPath = (id) => `/api/threads/${encodeURIComponent(id)}`;

// ---------------------------------------------------------------- helpers

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function utc(at) {
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return "";
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function relative(ms) {
  const s = (Date.now() - ms) / 1000;
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

// timeEl is a relative time, refreshed every 30 s, with the absolute time
// in its title.
function timeEl(at, className = "when") {
  const t = el("time", className);
  setTime(t, at);
  return t;
}

function setTime(t, at) {
  const ms = timeOf(at);
  if (Number.isNaN(ms)) { t.hidden = true; delete t.dataset.at; return; }
  t.hidden = false;
  t.dateTime = new Date(ms).toISOString();
  t.dataset.at = String(ms);
  t.title = new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
  t.textContent = relative(ms);
}

function refreshTimes() {
  for (const t of document.querySelectorAll("time[data-at]")) t.textContent = relative(Number(t.dataset.at));
}

function keyFor(id) {
  for (const t of app.threads.values()) if (t.id === id) return t.key;
  return id.includes("~") ? id.replaceAll("~", "/") : `web/${id}`;
}

function summaryById(id) {
  for (const t of app.threads.values()) if (t.id === id) return t;
  return null;
}

const statusWords = {
  running: "working",
  waiting: "waiting for approval",
};

// statusOf is the pill's text: the server's status, or the run state.
function statusOf(s) {
  if (!s) return "";
  if (typeof s.status === "string") return s.status;
  return statusWords[s.state] || "";
}

function statusClass(status) {
  switch (status) {
    case "working": case "resumed after restart": return "pill-working";
    case "waiting for approval": return "pill-waiting";
    case "done": return "pill-done";
    case "failed": return "pill-failed";
    case "stopped": case "stopped at the round limit": return "pill-stopped";
    default: return "pill-idle";
  }
}

function setPill(p, status) {
  p.textContent = status;
  p.dataset.status = status;
  p.className = `pill ${statusClass(status)}`;
  p.hidden = !status;
}

function progress(plan) {
  const items = plan && plan.items ? plan.items : [];
  return [items.filter((i) => i.status === "completed").length, items.length];
}

// footer is chat.Plan.Footer, character for character.
function footer(plan) {
  const [done, total] = progress(plan);
  let state = plan.state || "working";
  if (plan.state === "stopped" && plan.stopped_by) state += ` by ${plan.stopped_by}`;
  const open = total - done;
  if (open > 0 && !["working", "resumed after restart", "waiting for approval"].includes(plan.state)) {
    state += ` · ${open} open item${open === 1 ? "" : "s"} left`;
  }
  if (plan.activity) state += ` · ${plan.activity}`;
  return `Updated ${utc(plan.updated)} · revision ${plan.revision} · ${state}`;
}

// ---------------------------------------------------------------- markdown

// renderMarkdown turns model text into DOM nodes: paragraphs, line breaks,
// headings, lists, quotes, fenced code, **bold**, *italic*, `code` and
// http(s) links. Nothing in the text is ever parsed as HTML.
function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  const fence = /^\s{0,3}(`{3,}|~{3,})\s*([\w+.#-]*)\s*$/;
  const bullet = /^\s*([-*+])\s+(.*)$/;
  const ordered = /^\s*(\d{1,9})[.)]\s+(.*)$/;
  const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const quote = /^\s{0,3}>\s?(.*)$/;
  const rule = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
  const isBlockStart = (l) => fence.test(l) || bullet.test(l) || ordered.test(l) || heading.test(l) || quote.test(l) || rule.test(l);
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    let m;
    if ((m = line.match(fence))) {
      const close = m[1];
      const body = [];
      i++;
      while (i < lines.length && !(lines[i].trim().startsWith(close[0].repeat(close.length)) && lines[i].trim().replaceAll(close[0], "") === "")) body.push(lines[i++]);
      i++; // the closing fence, or the end
      const pre = el("pre", "md-code");
      const code = el("code", "", body.join("\n"));
      if (m[2]) code.dataset.lang = m[2];
      pre.append(code);
      frag.append(pre);
      continue;
    }
    if ((m = line.match(heading))) {
      const h = el("p", `md-h md-h${m[1].length}`);
      h.append(...inline(m[2]));
      frag.append(h);
      i++;
      continue;
    }
    if (rule.test(line)) { frag.append(el("hr")); i++; continue; }
    if (quote.test(line)) {
      const body = [];
      while (i < lines.length && (m = lines[i].match(quote))) { body.push(m[1]); i++; }
      const bq = el("blockquote");
      bq.append(renderMarkdown(body.join("\n")));
      frag.append(bq);
      continue;
    }
    const isOl = ordered.test(line);
    if (isOl || bullet.test(line)) {
      const re = isOl ? ordered : bullet;
      const list = el(isOl ? "ol" : "ul");
      if (isOl) {
        const start = Number(line.match(ordered)[1]);
        if (start !== 1) list.start = start;
      }
      let li = null;
      while (i < lines.length) {
        const l = lines[i];
        if ((m = l.match(re))) {
          li = el("li");
          li.append(...inline(isOl ? m[2] : m[2]));
          list.append(li);
          i++;
        } else if (l.trim() && /^\s+/.test(l) && !isBlockStart(l) && li) {
          li.append(el("br"), ...inline(l.trim())); // a continuation line
          i++;
        } else {
          break;
        }
      }
      frag.append(list);
      continue;
    }
    const p = el("p");
    let first = true;
    while (i < lines.length && lines[i].trim() && (first || !isBlockStart(lines[i]))) {
      if (!first) p.append(el("br"));
      p.append(...inline(lines[i]));
      first = false;
      i++;
    }
    frag.append(p);
  }
  return frag;
}

// safeURL returns an absolute http(s) URL, or "" for anything else
// (javascript:, data:, relative paths).
function safeURL(raw) {
  try {
    const u = new URL(raw);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : "";
  } catch {
    return "";
  }
}

function link(href, label) {
  const a = el("a", "md-link");
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  a.append(...label);
  return a;
}

const inlineRules = [
  { re: /`([^`\n]+)`/, make: (m) => [el("code", "", m[1])] },
  {
    re: /\[([^\]\n]+)\]\(\s*([^\s()]+)\s*\)/,
    make: (m) => {
      const href = safeURL(m[2]);
      return href ? [link(href, inline(m[1]))] : inline(m[1]).concat([document.createTextNode(` (${m[2]})`)]);
    },
  },
  {
    re: /\bhttps?:\/\/[^\s<>"'`]+/,
    make: (m) => {
      let url = m[0];
      let tail = "";
      while (/[.,;:!?)\]}*_]$/.test(url)) {
        if (url.endsWith(")") && (url.match(/\(/g) || []).length >= (url.match(/\)/g) || []).length) break;
        tail = url.slice(-1) + tail;
        url = url.slice(0, -1);
      }
      const href = safeURL(url);
      const out = href ? [link(href, [document.createTextNode(url)])] : [document.createTextNode(url)];
      if (tail) out.push(document.createTextNode(tail));
      return out;
    },
  },
  { re: /\*\*(?=\S)([^\n]*?\S)\*\*/, make: (m) => [wrap("strong", m[1])] },
  { re: /__(?=\S)([^\n]*?\S)__(?!\w)/, make: (m) => [wrap("strong", m[1])] },
  { re: /(?<![\w*])\*(?![\s*])([^*\n]*?[^\s*])\*(?![\w*])/, make: (m) => [wrap("em", m[1])] },
  { re: /(?<![\w_])_(?![\s_])([^_\n]*?[^\s_])_(?![\w_])/, make: (m) => [wrap("em", m[1])] },
];

function wrap(tag, text) {
  const e = el(tag);
  e.append(...inline(text));
  return e;
}

// inline renders one line's spans; the earliest match wins, ties go to the
// rule listed first (code before links before emphasis).
function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    let best = null;
    for (const rule of inlineRules) {
      const m = rule.re.exec(rest);
      if (m && (!best || m.index < best.m.index)) best = { m, rule };
    }
    if (!best) { out.push(document.createTextNode(rest)); break; }
    if (best.m.index > 0) out.push(document.createTextNode(rest.slice(0, best.m.index)));
    out.push(...best.rule.make(best.m));
    rest = rest.slice(best.m.index + best.m[0].length);
  }
  return out;
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
  if (resync) app.listSeq.clear();
  const next = new Map();
  for (const s of list) {
    if (app.deletedKeys.has(s.key)) continue;
    const old = app.threads.get(s.key);
    const seen = app.listSeq.get(s.key) ?? -1;
    if (old && !resync && typeof s.seq === "number" && s.seq < seen) {
      // Events newer than this answer were applied already: keep their
      // state, take the rest.
      next.set(s.key, { ...s, plan: old.plan, state: old.state, status: old.status, seq: old.seq, updated: later(old.updated, s.updated), unread: old.unread });
    } else {
      next.set(s.key, { ...s, updated: old ? later(old.updated, s.updated) : s.updated, unread: old ? old.unread : false });
      if (typeof s.seq === "number") app.listSeq.set(s.key, Math.max(s.seq, resync ? -1 : seen));
    }
  }
  // A thread created here after this fetch began is not in its answer yet.
  for (const [key, at] of app.createdAt) {
    if (at > started && !next.has(key) && app.threads.has(key)) next.set(key, app.threads.get(key));
  }
  app.threads = next;
  const v = app.view;
  if (v && v.loaded) {
    const s = app.threads.get(v.key);
    if (s && s.title) setTitle(s.title);
  }
  renderList();
  document.body.dataset.ready = "1";
}

function later(a, b) {
  const x = timeOf(a), y = timeOf(b);
  if (Number.isNaN(y)) return a;
  if (Number.isNaN(x)) return b;
  return x >= y ? a : b;
}

// timeOf is a time in ms, or NaN for none (missing, or Go's zero time).
function timeOf(at) {
  const ms = Date.parse(at);
  return ms > Date.UTC(2000, 0, 1) ? ms : NaN;
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
  setPill(li.querySelector(".pill"), statusOf(t));
  const [done, total] = progress(t.plan);
  li.querySelector(".progress").textContent = total ? `${done}/${total} done` : "";
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
  const seen = app.listSeq.get(e.thread) ?? -1;
  if (typeof e.seq === "number") {
    if (e.seq <= seen) return;
    app.listSeq.set(e.thread, e.seq);
    t.seq = e.seq;
  }
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

// A view is the open thread: its id and key, the newest seq it shows, and
// while a fetch is in flight (fetching > 0) the events held back for it.
function openThread(id, seed) {
  saveDraft();
  closeDrawer();
  const summary = (seed && seed.thread) || (id ? summaryById(id) : null);
  const v = id ? { id, key: summary ? summary.key : keyFor(id), platform: summary ? summary.platform : "web", seq: -1, loaded: false, fetching: 0, pending: [], items: [], summary: summary ? { ...summary } : null, historyToken: 0 } : null;
  app.view = v;
  document.body.dataset.loading = "0";
  $("messages").replaceChildren();
  $("load-error").hidden = true;
  hideSendError();
  renderPlan(null);
  resetHistory();
  restoreDraft(id);
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
    v.loaded = true;
    v.seq = typeof seed.thread.seq === "number" ? seed.thread.seq : -1;
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
  const token = ++v.fetching;
  if (resync) v.resync = true;
  document.body.dataset.loading = "1";
  let data;
  try {
    data = await api(threadPath(v.id));
  } catch (e) {
    if (app.view !== v || token !== v.fetching) return;
    v.fetching = 0;
    document.body.dataset.loading = "0";
    if (e.status === 404) {
      v.missing = true;
      v.items = [];
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
    replayPending(v);
    return;
  }
  if (app.view !== v || token !== v.fetching) return; // a newer fetch or another thread
  v.fetching = 0;
  document.body.dataset.loading = "0";
  const seq = typeof data.seq === "number" ? data.seq : data.thread && typeof data.thread.seq === "number" ? data.thread.seq : -1;
  if (v.resync || seq >= v.seq || !v.loaded) {
    v.resync = false;
    v.loaded = true;
    v.missing = false;
    v.seq = seq;
    v.key = data.thread.key;
    v.platform = data.thread.platform;
    v.summary = { ...data.thread };
    $("load-error").hidden = true;
    setTitle(data.thread.title || data.thread.key);
    renderPlan(data.thread.plan);
    setTimeline(data.messages || [], data.cards || []);
    renderStatus();
    updateComposer();
    const s = app.threads.get(v.key);
    if (s) { s.unread = false; renderList(); }
  }
  replayPending(v);
}

function replayPending(v) {
  const pending = v.pending.sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0));
  v.pending = [];
  for (const e of pending) applyToView(v, e);
}

function setTitle(text) {
  $("thread-title").textContent = text;
  document.title = app.view ? `${text} · pinplan` : "pinplan console";
}

function renderStatus() {
  const v = app.view;
  const s = v && v.summary;
  const status = statusOf(s);
  setPill($("status"), status);
  setPill($("plan-status"), status);
  // The pill's status is the live word; the state can lag it in a fetched
  // summary (it is read from the store), so the status decides.
  const running = !!s && (status ? status === "working" || status === "resumed after restart" : s.state === "running");
  $("working").hidden = !running;
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

function messageId(m) {
  return `m|${m.role}|${m.at}|${m.author || ""}|${m.text}`;
}

function sortKeyOfCard(card) {
  if (!card.outcome) return Number.POSITIVE_INFINITY; // open: waiting at the end
  const at = Date.parse(card.at);
  return Number.isNaN(at) ? Number.POSITIVE_INFINITY : at;
}

function placeItem(v, item) {
  const list = $("messages");
  const idx = v.items.findIndex((x) => x.sort > item.sort);
  if (idx < 0) {
    v.items.push(item);
    list.append(item.el);
  } else {
    v.items.splice(idx, 0, item);
    list.insertBefore(item.el, v.items[idx + 1].el);
  }
}

// sameMessage: the server stamps a message's live echo and its stored copy
// a few milliseconds apart, so a message is the same when its role, author
// and text are and its times are close.
const echoWindow = 3000;
function sameMessage(x, m, at) {
  return x.role === m.role && x.text === m.text && x.author === (m.author || "") && Math.abs(x.sort - at) < echoWindow;
}

// addMessage shows m once, in time order.
function addMessage(m, v = app.view) {
  if (!v) return;
  const id = messageId(m);
  let at = Date.parse(m.at);
  if (Number.isNaN(at)) at = Date.now();
  if (v.items.some((x) => x.id === id || sameMessage(x, m, at))) return; // shown already
  placeItem(v, { id, sort: at, el: messageEl(m), role: m.role, author: m.author || "", text: m.text });
  stickToBottom(m.role === "user");
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
    body.append(renderMarkdown(m.text));
  }
  li.append(head, body);
  return li;
}

function upsertCard(card, v = app.view) {
  if (!v) return;
  const id = `c|${card.id}`;
  const old = v.items.find((x) => x.id === id);
  if (old) {
    fillCard(old.el, card);
    // Decided, it sits where it was decided: before the answer that
    // followed, not after it.
    const sort = sortKeyOfCard(card);
    if (sort !== old.sort) {
      v.items.splice(v.items.indexOf(old), 1);
      old.sort = sort;
      placeItem(v, old);
    }
    return;
  }
  const li = el("li", "card");
  li.dataset.card = card.id;
  fillCard(li, card);
  placeItem(v, { id, sort: sortKeyOfCard(card), el: li });
  stickToBottom();
}

const cardButtons = [["allow", "Allow once", "primary"], ["always", "Always allow here", "secondary"], ["deny", "Deny", "danger"]];

function fillCard(li, card) {
  const head = el("div", "card-head");
  head.append(el("span", "card-icon", "🔐"));
  const title = el("strong", "card-title", card.server ? `Approval needed: ${card.tool} (server ${card.server})` : `Approval needed: ${card.tool}`);
  head.append(title);
  const pre = el("pre", "args");
  let args = card.arguments || "";
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* cut at 1,000 characters: shown as sent */ }
  pre.append(el("code", "", args));
  const status = el("p", "status");
  if (card.outcome) {
    let s = card.outcome;
    if (card.by) s += ` by ${card.by}`;
    if (card.at) s += ` at ${utc(card.at)}`;
    status.textContent = `${s}.`;
    li.dataset.outcome = card.outcome;
    li.classList.toggle("denied", /^den/i.test(card.outcome));
  } else {
    let s = "Waiting for a decision";
    if (card.requester && card.requester !== "web") s += ` from ${card.requester} or an approver`;
    if (card.deadline && !card.deadline.startsWith("0001-")) s += `; denied if nobody decides by ${utc(card.deadline).slice(11, 16)} UTC`;
    status.textContent = `${s}.`;
    delete li.dataset.outcome;
    li.classList.remove("denied");
  }
  li.replaceChildren(head, pre, status);
  if (!card.outcome && app.view && app.view.platform === "web") {
    const row = el("div", "buttons");
    for (const [action, label, kind] of cardButtons) {
      const b = el("button", `${action} ${kind}`, label);
      b.type = "button";
      b.addEventListener("click", () => press(`pinplan:${action}:${card.id}`, row));
      row.append(b);
    }
    li.append(row);
  }
}

function setTimeline(messages, cards) {
  const v = app.view;
  const old = new Map(v.items.map((x) => [x.id, x]));
  const local = v.items.filter((x) => x.local);
  v.items = [];
  const items = [];
  for (const m of messages) {
    const id = messageId(m);
    if (items.some((x) => x.id === id)) continue;
    const sort = Date.parse(m.at);
    items.push({ id, sort: Number.isNaN(sort) ? 0 : sort, el: old.has(id) ? old.get(id).el : messageEl(m), role: m.role, author: m.author || "", text: m.text });
  }
  for (const card of cards) {
    const id = `c|${card.id}`;
    const li = old.has(id) ? old.get(id).el : el("li", "card");
    li.dataset.card = card.id;
    fillCard(li, card);
    items.push({ id, sort: sortKeyOfCard(card), el: li });
  }
  items.push(...local);
  items.sort((a, b) => a.sort - b.sort);
  v.items = items;
  $("messages").replaceChildren(...items.map((x) => x.el));
  stickToBottom(true);
}

function addLocalNote(text) {
  const v = app.view;
  if (!v) return;
  const m = { role: "notice", text, at: new Date().toISOString() };
  placeItem(v, { id: `l|${Math.random()}`, sort: Date.now(), el: messageEl(m), local: true });
  stickToBottom(true);
}

let wasAtBottom = true;
function stickToBottom(force) {
  const s = $("scroller");
  if (force || wasAtBottom) requestAnimationFrame(() => { s.scrollTop = s.scrollHeight; });
}

// ---- the plan

let shownPlan = null;

// olderPlan: p is an earlier state of the plan than cur.
function olderPlan(p, cur) {
  if (!cur) return false;
  if (p.revision !== cur.revision) return p.revision < cur.revision;
  return Date.parse(p.updated) < Date.parse(cur.updated);
}

function renderPlan(plan) {
  shownPlan = plan || null;
  const box = $("plan");
  document.body.classList.toggle("has-plan", !!(plan && plan.items && plan.items.length));
  if (!plan || !plan.items || plan.items.length === 0) {
    box.hidden = true;
    delete box.dataset.revision;
    delete box.dataset.state;
    return;
  }
  const [done, total] = progress(plan);
  $("plan-title").textContent = `Plan · ${done}/${total} done`;
  $("plan-items").replaceChildren(...plan.items.map((it) => {
    const li = el("li", it.status);
    li.dataset.status = it.status;
    const mark = el("span", "mark", app.marks[it.status] || "•");
    mark.setAttribute("role", "img");
    mark.setAttribute("aria-label", it.status.replace("_", " "));
    const text = el(it.status === "completed" ? "s" : it.status === "in_progress" ? "strong" : "span", "text", it.content);
    li.append(mark, text);
    return li;
  }));
  $("plan-footer").textContent = footer(plan);
  $("stop").hidden = !plan.stoppable || !app.view || app.view.platform !== "web";
  box.dataset.revision = String(plan.revision);
  box.dataset.state = plan.state || "";
  box.hidden = false;
  const v = app.view;
  if (v && $("plan-history").open && plan.revision > (v.historyRevision ?? -1)) scheduleHistory();
}

// ---- revision history, per thread

let historyTimer = 0;
function resetHistory() {
  clearTimeout(historyTimer);
  $("plan-revisions").replaceChildren();
  $("plan-history-note").hidden = true;
  if ($("plan-history").open && app.view) scheduleHistory(0);
}

function scheduleHistory(delay = 120) {
  clearTimeout(historyTimer);
  historyTimer = setTimeout(loadHistory, delay);
}

async function loadHistory() {
  const v = app.view;
  if (!v || !$("plan-history").open) return;
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
  const out = [];
  let prev = null;
  for (const r of revs) {
    out.push(revisionEl(r, prev));
    prev = r;
  }
  out.reverse(); // newest first
  $("plan-revisions").replaceChildren(...out);
}

// diffItems lists what changed between two revisions' items: added,
// removed, and status changes, matched by content.
function diffItems(before, after) {
  const left = (before || []).map((it) => ({ ...it, used: false }));
  const changes = [];
  for (const it of after) {
    const match = left.find((x) => !x.used && x.content === it.content);
    if (!match) { changes.push({ kind: "added", item: it }); continue; }
    match.used = true;
    if (match.status !== it.status) changes.push({ kind: "changed", item: it, from: match.status });
  }
  for (const x of left) if (!x.used) changes.push({ kind: "removed", item: x });
  return changes;
}

const statusNames = { pending: "pending", in_progress: "in progress", completed: "completed" };

function revisionEl(r, prev) {
  const li = el("li", "revision");
  li.dataset.revision = String(r.revision);
  const head = el("div", "rev-head");
  const [done, total] = progress(r);
  head.append(el("strong", "", `Revision ${r.revision}`), document.createTextNode(" · "), timeEl(r.at), document.createTextNode(` · ${done}/${total} done`));
  li.append(head);
  const changes = prev ? diffItems(prev.items, r.items || []) : (r.items || []).map((item) => ({ kind: "added", item }));
  if (!prev) li.append(el("p", "rev-note", "Plan created."));
  if (changes.length === 0) {
    li.append(el("p", "rev-note", "No change to the items."));
    return li;
  }
  const ul = el("ul", "diff");
  for (const c of changes) {
    const row = el("li", c.kind);
    const sign = el("span", "sign", c.kind === "added" ? "+" : c.kind === "removed" ? "−" : "~");
    sign.setAttribute("aria-hidden", "true");
    const what = el("span", "visually-hidden", c.kind === "changed" ? `${statusNames[c.from] || c.from} to ${statusNames[c.item.status] || c.item.status}: ` : `${c.kind}: `);
    const marks = el("span", "marks", c.kind === "changed" ? `${app.marks[c.from] || ""}→${app.marks[c.item.status] || ""}` : app.marks[c.item.status] || "");
    marks.setAttribute("aria-hidden", "true");
    row.append(sign, what, marks, el(c.kind === "removed" ? "s" : "span", "text", c.item.content));
    ul.append(row);
  }
  li.append(ul);
  return li;
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
    case "state":
      touchList(e, (t) => { t.state = e.state; t.status = e.status; });
      break;
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
  if (v.fetching || !v.loaded) {
    v.pending.push(e); // replayed on top of the fetch's answer
    return;
  }
  applyToView(v, e);
}

function applyToView(v, e) {
  if (typeof e.seq === "number") {
    if (e.seq <= v.seq) {
      // The page shows this state already. A message is the exception:
      // messages only add up, and one that landed while the fetch was
      // being read may be missing from it; addMessage drops it if shown.
      if (e.type === "message" && e.message) addMessage(e.message, v);
      return;
    }
    v.seq = e.seq;
  }
  switch (e.type) {
    case "plan":
      if (v.summary) v.summary.plan = e.plan;
      renderPlan(e.plan);
      break;
    case "message":
      if (e.message) addMessage(e.message, v);
      break;
    case "card":
      if (e.card) upsertCard(e.card, v);
      break;
    case "state":
      if (!v.summary) v.summary = { key: v.key, id: v.id };
      v.summary.state = e.state;
      v.summary.status = e.status;
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
  if (!text.trim()) {
    showSendError("Type a message first.");
    return;
  }
  hideSendError();
  app.sending = true;
  updateComposer();
  try {
    if (!v) {
      const res = await api("/api/threads", "POST", { text });
      app.drafts.delete("");
      $("text").value = "";
      autosize();
      const s = { ...res.thread, unread: false };
      app.threads.set(s.key, s);
      app.createdAt.set(s.key, performance.now());
      if (typeof s.seq === "number") app.listSeq.set(s.key, s.seq);
      navigate(s.id, { thread: s, message: res.message });
    } else {
      const res = await api(`${threadPath(v.id)}/messages`, "POST", { text });
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

// press sends a card's or the plan's button; the answer is the card or plan
// as it now is, or a note for this user only.
async function press(button, row) {
  const v = app.view;
  if (!v) return;
  if (row) for (const b of row.querySelectorAll("button")) b.disabled = true;
  try {
    const res = await api(`${threadPath(v.id)}/click`, "POST", { button });
    if (app.view !== v || !res) return;
    // The answer carries no sequence number, and the plan's live event
    // can overtake it: show it only when it is not older than the shown one.
    if (res.card && !(!res.card.outcome && v.items.some((x) => x.id === `c|${res.card.id}` && x.el.dataset.outcome))) upsertCard(res.card, v);
    if (res.plan && !olderPlan(res.plan, shownPlan)) renderPlan(res.plan);
    if (res.private) addLocalNote(res.private);
    if (row && row.isConnected) for (const b of row.querySelectorAll("button")) b.disabled = false;
  } catch (e) {
    if (row && row.isConnected) for (const b of row.querySelectorAll("button")) b.disabled = false;
    addLocalNote(`That did not work: ${e.message}`);
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
    else history.pushState(null, "", location.pathname + location.search);
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

$("stop").addEventListener("click", () => press("pinplan:stop:plan"));
$("plan-history").addEventListener("toggle", () => {
  if ($("plan-history").open) scheduleHistory(0);
});

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
  const mode = $("mode");
  if (info.demo) { mode.textContent = "demo model: scripted, no API key used"; mode.hidden = false; }
  else if (info.model) { mode.textContent = `model: ${info.model}`; mode.hidden = false; }
  else { mode.textContent = "no model configured"; mode.hidden = false; }
}).catch(() => {});

openThread(decodeURIComponent(location.hash.slice(1)));
loadList(false);
connect();
