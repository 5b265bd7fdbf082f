// The open thread's timeline: messages and approval cards in time order,
// each shown once. A message is known by the id the server gives it,
// the same in the answer to a POST, in the live event and in a fetch of
// the thread, so a message that arrives several ways is one item. Pure:
// the items carry their elements, but this module never touches them.

// messageKey is a message's item id. Every message the server sends has
// an id; one without (an older server) is known by all it says.
export function messageKey(m) {
  return m.id ? `m|${m.id}` : `m|${m.role}|${m.at}|${m.author || ""}|${m.text}`;
}

// cardKey is a card's item id.
export function cardKey(card) {
  return `c|${card.id}`;
}

// cardSort is where a card sits: an open one waits at the end, a decided
// one where it was decided.
export function cardSort(card) {
  if (!card.outcome) return Number.POSITIVE_INFINITY;
  const at = Date.parse(card.at);
  return Number.isNaN(at) ? Number.POSITIVE_INFINITY : at;
}

// Timeline is the items, { id, sort, ... }, in sort order; items with the
// same sort stay in the order they came.
export class Timeline {
  constructor(items = []) {
    this.items = [];
    this.reset(items);
  }

  get(id) {
    return this.items.find((x) => x.id === id);
  }

  has(id) {
    return this.items.some((x) => x.id === id);
  }

  // insert adds item and returns the item it now sits before (null: at
  // the end), or undefined when an item with its id is there already.
  insert(item) {
    if (this.has(item.id)) return undefined;
    const idx = this.items.findIndex((x) => x.sort > item.sort);
    if (idx < 0) {
      this.items.push(item);
      return null;
    }
    this.items.splice(idx, 0, item);
    return this.items[idx + 1];
  }

  // remove takes the item with id out and returns it (undefined if
  // there is none).
  remove(id) {
    const idx = this.items.findIndex((x) => x.id === id);
    if (idx < 0) return undefined;
    return this.items.splice(idx, 1)[0];
  }

  // move gives item a new sort and returns what insert returns.
  move(item, sort) {
    const idx = this.items.indexOf(item);
    if (idx >= 0) this.items.splice(idx, 1);
    item.sort = sort;
    return this.insert(item);
  }

  // reset replaces every item: the first of each id, sorted.
  reset(items) {
    const seen = new Set();
    this.items = items.filter((x) => !seen.has(x.id) && seen.add(x.id));
    this.items.sort((a, b) => a.sort - b.sort);
  }
}
