// Markdown of the model's answers, for the console.
//
// parse turns text into a tree of plain objects, { tag, cls, attrs,
// children } with strings for text; render builds DOM nodes from it with
// the document it is given. Nothing in the text is ever parsed as HTML:
// text only becomes text nodes, the tags are this module's own, and the
// only attributes are a link's checked http(s) href, its target and rel,
// a list's start and a code block's data-lang.
//
// Handled: paragraphs, line breaks, headings, lists, quotes, rules, fenced
// code, **bold**, *italic*, `code`, [links](https://...) and bare http(s)
// links. (No npm markdown library fits: the well-kept ones build an HTML
// string for innerHTML, which this page never uses.)

const fence = /^\s{0,3}(`{3,}|~{3,})\s*([\w+.#-]*)\s*$/;
const bullet = /^\s*([-*+])\s+(.*)$/;
const ordered = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const heading = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const quote = /^\s{0,3}>\s?(.*)$/;
const rule = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const isBlockStart = (l) => fence.test(l) || bullet.test(l) || ordered.test(l) || heading.test(l) || quote.test(l) || rule.test(l);

function node(tag, children = [], cls = "", attrs = null) {
  const n = { tag, children };
  if (cls) n.cls = cls;
  if (attrs) n.attrs = attrs;
  return n;
}

// parse returns the block nodes of text.
export function parse(text) {
  const out = [];
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
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
      out.push(node("pre", [node("code", [body.join("\n")], "", m[2] ? { "data-lang": m[2] } : null)], "md-code"));
      continue;
    }
    if ((m = line.match(heading))) {
      out.push(node("p", inline(m[2]), `md-h md-h${m[1].length}`));
      i++;
      continue;
    }
    if (rule.test(line)) { out.push(node("hr")); i++; continue; }
    if (quote.test(line)) {
      const body = [];
      while (i < lines.length && (m = lines[i].match(quote))) { body.push(m[1]); i++; }
      out.push(node("blockquote", parse(body.join("\n"))));
      continue;
    }
    const isOl = ordered.test(line);
    if (isOl || bullet.test(line)) {
      const re = isOl ? ordered : bullet;
      let attrs = null;
      if (isOl) {
        const start = Number(line.match(ordered)[1]);
        if (start !== 1) attrs = { start: String(start) };
      }
      const list = node(isOl ? "ol" : "ul", [], "", attrs);
      let li = null;
      while (i < lines.length) {
        const l = lines[i];
        if ((m = l.match(re))) {
          li = node("li", inline(m[2]));
          list.children.push(li);
          i++;
        } else if (l.trim() && /^\s+/.test(l) && !isBlockStart(l) && li) {
          li.children.push(node("br"), ...inline(l.trim())); // a continuation line
          i++;
        } else {
          break;
        }
      }
      out.push(list);
      continue;
    }
    const p = node("p");
    let first = true;
    while (i < lines.length && lines[i].trim() && (first || !isBlockStart(lines[i]))) {
      if (!first) p.children.push(node("br"));
      p.children.push(...inline(lines[i]));
      first = false;
      i++;
    }
    out.push(p);
  }
  return out;
}

// safeURL returns an absolute http(s) URL, or "" for anything else
// (javascript:, data:, relative paths).
export function safeURL(raw) {
  try {
    const u = new URL(raw);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : "";
  } catch {
    return "";
  }
}

const link = (href, label) => node("a", label, "md-link", { href, target: "_blank", rel: "noopener noreferrer" });

const inlineRules = [
  { re: /`([^`\n]+)`/, make: (m) => [node("code", [m[1]])] },
  {
    re: /\[([^\]\n]+)\]\(\s*([^\s()]+)\s*\)/,
    make: (m) => {
      const href = safeURL(m[2]);
      return href ? [link(href, inline(m[1]))] : inline(m[1]).concat([` (${m[2]})`]);
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
      const out = href ? [link(href, [url])] : [url];
      if (tail) out.push(tail);
      return out;
    },
  },
  { re: /\*\*(?=\S)([^\n]*?\S)\*\*/, make: (m) => [node("strong", inline(m[1]))] },
  { re: /__(?=\S)([^\n]*?\S)__(?!\w)/, make: (m) => [node("strong", inline(m[1]))] },
  { re: /(?<![\w*])\*(?![\s*])([^*\n]*?[^\s*])\*(?![\w*])/, make: (m) => [node("em", inline(m[1]))] },
  { re: /(?<![\w_])_(?![\s_])([^_\n]*?[^\s_])_(?![\w_])/, make: (m) => [node("em", inline(m[1]))] },
];

// inline parses one line's spans; the earliest match wins, ties go to the
// rule listed first (code before links before emphasis).
function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    let best = null;
    for (const r of inlineRules) {
      const m = r.re.exec(rest);
      if (m && (!best || m.index < best.m.index)) best = { m, r };
    }
    if (!best) { out.push(rest); break; }
    if (best.m.index > 0) out.push(rest.slice(0, best.m.index));
    out.push(...best.r.make(best.m));
    rest = rest.slice(best.m.index + best.m[0].length);
  }
  return out;
}

// render builds nodes (from parse) as a DocumentFragment of doc.
export function render(nodes, doc) {
  const frag = doc.createDocumentFragment();
  for (const n of nodes) frag.append(build(n, doc));
  return frag;
}

function build(n, doc) {
  if (typeof n === "string") return doc.createTextNode(n);
  const e = doc.createElement(n.tag);
  if (n.cls) e.className = n.cls;
  for (const [k, v] of Object.entries(n.attrs || {})) e.setAttribute(k, v);
  for (const c of n.children) e.append(build(c, doc));
  return e;
}

// renderMarkdown is text as DOM nodes of doc.
export function renderMarkdown(text, doc) {
  return render(parse(text), doc);
}
