// Sequence-number replay: the rules that keep the page's live state from
// going backwards. Pure: no DOM.
//
// Every event and every fetched thread carries a sequence number (seq):
// one counter for the whole console, so a thread's events increase, with
// gaps. The page never applies an event older than what it
// shows. While a thread is being fetched its events are held back and
// replayed on top of the answer, so the live echo and the load cannot
// race. A message is the exception: messages only add up, and one that
// landed while the fetch was being read may be missing from its answer,
// so an old message is still passed on; the timeline shows each message
// id once.

import { later } from "./times.js";

// ThreadReplay is the open thread's live state: the newest seq it shows,
// and while a fetch is in flight the events held back for it.
export class ThreadReplay {
  constructor() {
    this.seq = -1;
    this.loaded = false; // a fetch's answer (or a seed) is shown
    this.fetching = 0; // the newest fetch's token while one is in flight, else 0
    this.resync = false; // the next answer replaces the view whatever its seq
    this.pending = [];
  }

  // seed shows a thread the page has in hand (the answer to creating it).
  seed(seq) {
    this.loaded = true;
    this.seq = typeof seq === "number" ? seq : -1;
  }

  // begin starts a fetch and returns its token. A resync fetch's answer
  // is shown even if its seq is older (the server restarted).
  begin(resync = false) {
    if (resync) this.resync = true;
    return ++this.fetching;
  }

  // busy reports whether events are being held back.
  get busy() {
    return this.fetching !== 0 || !this.loaded;
  }

  // offer takes a live event and returns the events to apply now: none
  // while a fetch is in flight (they wait for its answer) or when it is
  // older than the view.
  offer(e) {
    if (this.busy) {
      this.pending.push(e);
      return [];
    }
    return this.admit(e) ? [e] : [];
  }

  // admit reports whether e is to be applied, and moves seq on to it.
  admit(e) {
    if (typeof e.seq !== "number") return true;
    if (e.seq <= this.seq) return e.type === "message" && !!e.message;
    this.seq = e.seq;
    return true;
  }

  // answer takes the answer of fetch token, with its seq. It returns null
  // when a newer fetch has started since (drop the answer), else { show,
  // events }: whether the answer replaces what the page shows, and the
  // held-back events to apply on top of it, in seq order.
  answer(token, seq) {
    if (token !== this.fetching) return null;
    this.fetching = 0;
    const s = typeof seq === "number" ? seq : -1;
    let show = false;
    if (this.resync || s >= this.seq || !this.loaded) {
      this.resync = false;
      this.loaded = true;
      this.seq = s;
      show = true;
    }
    return { show, events: this.drain() };
  }

  // failed ends fetch token without an answer: null when a newer fetch
  // runs, else the held-back events to apply.
  failed(token) {
    if (token !== this.fetching) return null;
    this.fetching = 0;
    return this.drain();
  }

  drain() {
    const pending = this.pending.sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0));
    this.pending = [];
    return pending.filter((e) => this.admit(e));
  }
}

// ListSeqs is the newest seq applied to each thread's entry in the list.
export class ListSeqs {
  constructor() {
    this.seen = new Map();
  }

  get(key) {
    return this.seen.get(key) ?? -1;
  }

  set(key, seq) {
    if (typeof seq === "number") this.seen.set(key, seq);
  }

  clear() {
    this.seen.clear();
  }

  // admit reports whether an event for key is newer than the list shows,
  // and records it.
  admit(key, seq) {
    if (typeof seq !== "number") return true;
    if (seq <= this.get(key)) return false;
    this.seen.set(key, seq);
    return true;
  }
}

// mergeList is the thread list after a fetch of it: list is the answer
// (summaries), old the list shown (by key), seqs what it shows of each.
// Events newer than the answer were applied already: their state stays.
// A resync (a new event stream) takes the answer whole. Deleted threads
// stay out; threads created here after the fetch began (created: key →
// when, started: when the fetch began) stay in.
export function mergeList({ old, list, seqs, resync = false, deleted = new Set(), created = new Map(), started = 0 }) {
  if (resync) seqs.clear();
  const next = new Map();
  for (const s of list) {
    if (deleted.has(s.key)) continue;
    const o = old.get(s.key);
    const seen = seqs.get(s.key);
    if (o && !resync && typeof s.seq === "number" && s.seq < seen) {
      next.set(s.key, { ...s, plan: o.plan, state: o.state, status: o.status, status_class: o.status_class, seq: o.seq, updated: later(o.updated, s.updated), unread: o.unread });
    } else {
      next.set(s.key, { ...s, updated: o ? later(o.updated, s.updated) : s.updated, unread: o ? o.unread : false });
      if (typeof s.seq === "number") seqs.set(s.key, Math.max(s.seq, resync ? -1 : seen));
    }
  }
  for (const [key, at] of created) {
    if (at > started && !next.has(key) && old.has(key)) next.set(key, old.get(key));
  }
  return next;
}

// olderPlan reports whether p is an earlier state of the plan than cur.
export function olderPlan(p, cur) {
  if (!cur) return false;
  if (p.revision !== cur.revision) return p.revision < cur.revision;
  return Date.parse(p.updated) < Date.parse(cur.updated);
}
