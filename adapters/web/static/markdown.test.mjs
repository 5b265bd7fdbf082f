import { test } from "node:test";
import assert from "node:assert/strict";

import { parse, render, renderMarkdown, safeURL } from "./markdown.js";
import { FakeDocument } from "./fakedom.mjs";

// html renders text with a fake document and returns the markup a browser
// would show, and the document, which recorded what was made.
function html(text) {
  const doc = new FakeDocument();
  return { out: renderMarkdown(text, doc).html, doc };
}

test("HTML in the text stays text", () => {
  const { out, doc } = html(`<img src=x onerror="window.__pwned=1"> and <b>raw</b> <script>alert(1)</script>`);
  assert.equal(out, `<p>&lt;img src=x onerror="window.__pwned=1"&gt; and &lt;b&gt;raw&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;</p>`);
  assert.deepEqual(doc.tags, ["p"]);
  assert.deepEqual(doc.attributes, []);
});

test("only http and https links become links", () => {
  const { out, doc } = html("[safe](https://example.com/a) [bad](javascript:window.__pwned=1) [data](data:text/html,x) [rel](/x) see https://example.com/b.");
  assert.equal(out,
    `<p><a class="md-link" href="https://example.com/a" target="_blank" rel="noopener noreferrer">safe</a> ` +
    `bad (javascript:window.__pwned=1) data (data:text/html,x) rel (/x) see ` +
    `<a class="md-link" href="https://example.com/b" target="_blank" rel="noopener noreferrer">https://example.com/b</a>.</p>`);
  assert.deepEqual([...new Set(doc.attributes)].sort(), ["a[href]", "a[rel]", "a[target]"]);
  assert.equal(safeURL("javascript:alert(1)"), "");
  assert.equal(safeURL("HTTPS://Example.com"), "https://example.com/");
  // A bare link keeps a closing parenthesis that belongs to it.
  assert.equal(html("(see https://en.wikipedia.org/wiki/Go_(language))").out,
    `<p>(see <a class="md-link" href="https://en.wikipedia.org/wiki/Go_(language)" target="_blank" rel="noopener noreferrer">https://en.wikipedia.org/wiki/Go_(language)</a>)</p>`);
});

test("a fenced code block keeps its text verbatim", () => {
  const text = "before\n\n```go\nfmt.Println(\"<script>x</script>\") // **not bold**\n\n  indented\n```\nafter";
  assert.deepEqual(parse(text), [
    { tag: "p", children: ["before"] },
    { tag: "pre", cls: "md-code", children: [{ tag: "code", attrs: { "data-lang": "go" }, children: ["fmt.Println(\"<script>x</script>\") // **not bold**\n\n  indented"] }] },
    { tag: "p", children: ["after"] },
  ]);
  // An unclosed fence runs to the end; inline code is code too.
  assert.equal(html("~~~\nopen").out, `<pre class="md-code"><code>open</code></pre>`);
  assert.equal(html("run `rm -rf <dir>` **now**").out, `<p>run <code>rm -rf &lt;dir&gt;</code> <strong>now</strong></p>`);
});

test("blocks: headings, lists, quotes and line breaks", () => {
  assert.equal(html("## Plan\n- one\n- *two*\n  more\n\n3. three\n4. four\n\n> quoted\n> **text**\n\nline\nbreak").out,
    `<p class="md-h md-h2">Plan</p>` +
    `<ul><li>one</li><li><em>two</em><br></br>more</li></ul>` +
    `<ol start="3"><li>three</li><li>four</li></ol>` +
    `<blockquote><p>quoted<br></br><strong>text</strong></p></blockquote>` +
    `<p>line<br></br>break</p>`);
  // snake_case words stay words.
  assert.equal(html("call read_text_file now").out, `<p>call read_text_file now</p>`);
});

test("render uses only the document it is given", () => {
  const doc = new FakeDocument();
  const frag = render(parse("**hi**"), doc);
  assert.equal(frag.html, "<p><strong>hi</strong></p>");
  assert.equal(typeof globalThis.document, "undefined"); // and importing touched no global DOM
});
