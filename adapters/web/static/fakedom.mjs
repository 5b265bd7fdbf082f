// A document just big enough for markdown.js's render, for node --test.
// It records every element and attribute made, so a test can check that
// nothing outside the renderer's own tags and attributes is ever created.

class FakeNode {
  constructor(doc, tag, text) {
    this.tagName = tag;
    this.text = text;
    this.childNodes = [];
    this.attributes = {};
    this.className = "";
    this.doc = doc;
  }

  append(...nodes) {
    for (const n of nodes) this.childNodes.push(n);
  }

  setAttribute(name, value) {
    this.attributes[name] = String(value);
    this.doc.attributes.push(`${this.tagName}[${name}]`);
  }

  get textContent() {
    return this.text !== undefined ? this.text : this.childNodes.map((n) => n.textContent).join("");
  }

  // html is the node as markup, text escaped: what a browser would show.
  get html() {
    if (this.text !== undefined) return this.text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
    const inner = this.childNodes.map((n) => n.html).join("");
    if (this.tagName === "#fragment") return inner;
    const attrs = Object.entries(this.attributes).map(([k, v]) => ` ${k}="${v.replaceAll('"', "&quot;")}"`).join("");
    const cls = this.className ? ` class="${this.className}"` : "";
    return `<${this.tagName}${cls}${attrs}>${inner}</${this.tagName}>`;
  }
}

export class FakeDocument {
  constructor() {
    this.tags = []; // every createElement, in order
    this.attributes = []; // every setAttribute, as tag[name]
  }

  createElement(tag) {
    this.tags.push(tag);
    return new FakeNode(this, tag);
  }

  createTextNode(text) {
    return new FakeNode(this, "#text", String(text));
  }

  createDocumentFragment() {
    return new FakeNode(this, "#fragment");
  }
}
