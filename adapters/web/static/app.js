"use strict";
// pinplan console: threads, messages and the pinned plan, live over SSE.
const $ = (id) => document.getElementById(id);
let marks = { completed: "✅", in_progress: "🔄", pending: "⬜" }; // replaced by /api/info
let current = null;   // selected thread id
let threads = [];

function api(path, opts) {
  return fetch(path, opts).then((r) => r.json().then((body) => {
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  }));
}

function progress(plan) {
  const done = plan.items.filter((i) => i.status === "completed").length;
  return [done, plan.items.length];
}

function footer(plan) {
  const [done, total] = progress(plan);
  let state = plan.state || "working";
  if (state === "stopped" && plan.stopped_by) state += ` by ${plan.stopped_by}`;
  const open = total - done;
  if (open > 0 && !["working", "resumed after restart", "waiting for approval"].includes(plan.state || "working")) {
    state += ` · ${open} open item${open === 1 ? "" : "s"} left`;
  }
  if (plan.activity) state += ` · ${plan.activity}`;
  const at = new Date(plan.updated).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  return `Updated ${at} · revision ${plan.revision} · ${state}`;
}

function renderPlan(plan) {
  const box = $("plan");
  if (!plan || !plan.items || plan.items.length === 0) { box.hidden = true; return; }
  const [done, total] = progress(plan);
  $("plan-title").textContent = `Plan · ${done}/${total} done`;
  const ol = $("plan-items");
  ol.replaceChildren(...plan.items.map((it) => {
    const li = document.createElement("li");
    li.className = it.status;
    li.dataset.status = it.status;
    const mark = document.createElement("span");
    mark.textContent = marks[it.status] + " ";
    mark.setAttribute("aria-label", it.status.replace("_", " "));
    const text = document.createElement(it.status === "completed" ? "s" : it.status === "in_progress" ? "strong" : "span");
    text.className = "text";
    text.textContent = it.content;
    li.append(mark, text);
    return li;
  }));
  $("plan-footer").textContent = footer(plan);
  $("stop").hidden = !plan.stoppable || !isWeb();
  box.dataset.revision = plan.revision;
  box.dataset.state = plan.state;
  box.hidden = false;
}

let currentPlatform = "web";
function isWeb() { return currentPlatform === "web"; }

// A press of a card's or the plan's button; the answer is the card or plan
// as it now is, or a note for this user only.
async function press(button) {
  if (!current) return;
  try {
    const res = await api(`/api/threads/${current}/click`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ button }) });
    if (res.card) renderCard(res.card);
    if (res.plan) renderPlan(res.plan);
    if (res.private) addMessage({ role: "notice", text: res.private });
  } catch (e) {
    addMessage({ role: "notice", text: `That did not work: ${e.message}` });
  }
}

const labels = [["allow", "Allow once"], ["always", "Always allow here"], ["deny", "Deny"]];

// renderCard shows an approval card, replacing its earlier state.
function renderCard(card) {
  let li = document.querySelector(`li.card[data-card="${CSS.escape(card.id)}"]`);
  if (!li) {
    li = document.createElement("li");
    li.className = "card";
    li.dataset.card = card.id;
    $("messages").append(li);
  }
  const title = document.createElement("strong");
  title.textContent = card.server ? `Approval needed: ${card.tool} (server ${card.server})` : `Approval needed: ${card.tool}`;
  const args = document.createElement("pre");
  args.textContent = card.arguments;
  const status = document.createElement("p");
  status.className = "status";
  if (card.outcome) {
    let s = card.outcome;
    if (card.by) s += ` by ${card.by}`;
    if (card.at) s += ` at ${new Date(card.at).toISOString().replace("T", " ").slice(0, 19)} UTC`;
    status.textContent = s + ".";
    li.dataset.outcome = card.outcome;
  } else {
    status.textContent = "Waiting for a decision.";
    delete li.dataset.outcome;
  }
  li.replaceChildren(title, args, status);
  if (!card.outcome && isWeb()) {
    const row = document.createElement("div");
    row.className = "buttons";
    for (const [action, label] of labels) {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = label;
      b.className = action;
      b.addEventListener("click", () => press(`pinplan:${action}:${card.id}`));
      row.append(b);
    }
    li.append(row);
  }
}

function addMessage(m) {
  const li = document.createElement("li");
  li.className = m.role;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = m.role === "user" ? (m.author || "you") : "pinplan";
  li.append(who, document.createTextNode(m.text));
  $("messages").append(li);
}

function renderList() {
  const ul = $("thread-list");
  ul.replaceChildren(...threads.map((t) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    const id = t.id;
    a.href = `#${id}`;
    if (id === current) a.setAttribute("aria-current", "page");
    a.textContent = t.title || t.key;
    const meta = document.createElement("span");
    meta.className = "meta";
    let p = "";
    if (t.plan && t.plan.items) { const [d, n] = progress(t.plan); p = ` · ${d}/${n} done`; }
    meta.textContent = `${t.platform} · ${t.state}${p}`;
    a.append(meta);
    li.append(a);
    return li;
  }));
}

async function loadThreads() {
  threads = await api("/api/threads");
  renderList();
}

async function loadThread(id) {
  current = id;
  $("messages").replaceChildren();
  $("plan").hidden = true;
  $("working").hidden = true;
  $("send").hidden = false;
  $("readonly").hidden = true;
  if (!id) { $("thread-title").textContent = "Start a thread"; renderList(); return; }
  try {
    const t = await api(`/api/threads/${id}`);
    $("thread-title").textContent = t.thread.title || id;
    // Slack and Discord threads are shown read-only, for operators.
    const web = t.thread.platform === "web";
    currentPlatform = t.thread.platform;
    $("send").hidden = !web;
    $("readonly").hidden = web;
    renderPlan(t.thread.plan);
    $("working").hidden = t.thread.state !== "running";
    (t.messages || []).forEach(addMessage);
    (t.cards || []).forEach(renderCard);
  } catch (e) {
    $("thread-title").textContent = "Thread not found";
  }
  renderList();
}

$("plan-history").addEventListener("toggle", async (ev) => {
  if (!ev.target.open || !current) return;
  const revs = await api(`/api/threads/${current}/plans`);
  $("plan-revisions").replaceChildren(...revs.map((r) => {
    const li = document.createElement("li");
    const d = r.items.filter((i) => i.status === "completed").length;
    li.textContent = `revision ${r.revision} · ${new Date(r.at).toLocaleTimeString()} · ${d}/${r.items.length} done: ` +
      r.items.map((i) => `${marks[i.status]} ${i.content}`).join("  ");
    return li;
  }));
});

$("send").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = $("text").value;
  if (!text.trim()) return;
  const path = current ? `/api/threads/${current}/messages` : "/api/threads";
  const res = await api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ text }) });
  $("text").value = "";
  if (!current) { location.hash = res.id; }
});

$("text").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("send").requestSubmit();
});

$("stop").addEventListener("click", () => press("pinplan:stop:plan"));

$("new-thread").addEventListener("click", () => { location.hash = ""; $("text").focus(); });
window.addEventListener("hashchange", () => loadThread(location.hash.slice(1)));

function connect() {
  const es = new EventSource("/api/events");
  es.onmessage = (msg) => {
    const e = JSON.parse(msg.data);
    const id = e.thread.startsWith("web/") ? e.thread.slice(4) : e.thread.replaceAll("/", "~");
    if (e.type === "plan") {
      const t = threads.find((x) => x.key === e.thread);
      if (t) { t.plan = e.plan; renderList(); }
      if (id === current) renderPlan(e.plan);
    } else if (e.type === "message" && id === current) {
      addMessage(e.message);
    } else if (e.type === "working") {
      const t = threads.find((x) => x.key === e.thread);
      if (t) { t.state = e.working ? "running" : "idle"; renderList(); }
      if (id === current) $("working").hidden = !e.working;
    } else if (e.type === "card" && id === current) {
      renderCard(e.card);
    } else if (e.type === "thread") {
      loadThreads();
    }
  };
  es.onopen = () => { document.body.dataset.live = "1"; };
}

api("/api/info").then((info) => {
  if (info.marks) marks = info.marks;
  if (info.demo) { $("mode").textContent = "demo model: scripted, no API key used"; $("mode").hidden = false; }
  else if (info.model) { $("mode").textContent = `model: ${info.model}`; $("mode").hidden = false; }
});
connect();
loadThreads().then(() => loadThread(location.hash.slice(1)));
