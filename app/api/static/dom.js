// Building DOM safely: text goes in as text (textContent), never as HTML.

/**
 * el("p", {class: "note", "data-seq": 3}, "text", child) — attributes set with
 * setAttribute (booleans: present when true), children appended as nodes or text.
 * `on` = {click: fn} adds listeners.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "on") {
      for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
    } else if (name === "text") {
      node.textContent = String(value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, ...children);
  return node;
}

export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

const integers = new Intl.NumberFormat("en-US");

/** 51234 -> "51,234" */
export function count(n) {
  return integers.format(n ?? 0);
}

/**
 * USD as a person reads it: "$0.000165", "$1.5", "$0"; "unknown" for null (the model has no
 * known price).
 */
export function usd(value) {
  if (typeof value !== "number" || !Number.isFinite(value)) return "unknown";
  if (value !== 0 && Math.abs(value) < 0.000001) return `$${value.toExponential(1)}`;
  return `$${value.toFixed(6).replace(/\.?0+$/, "") || "0"}`;
}

/** Seconds, short: 0.4 s, 12.3 s, 3 min 05 s. */
export function seconds(s) {
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
}

export function clockTime(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString();
}

/** Pretty JSON for a value that parsed; the raw text otherwise. */
export function prettyJson(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A labelled textarea and a button; Enter submits, Shift+Enter adds a line. */
export function messageBox({ id, label, hint, button, submit }) {
  const text = el("textarea", { id: `${id}-text`, rows: 2, "aria-describedby": `${id}-hint` });
  const error = el("p", { class: "error", role: "alert", id: `${id}-error` });
  const go = el("button", { type: "submit", id: `${id}-button` }, button);
  const form = el("form", { class: "message-box", id: `${id}-form`, hidden: true },
    el("label", { for: `${id}-text` }, label),
    text,
    el("small", { class: "hint", id: `${id}-hint` }, hint),
    el("div", { class: "actions" }, go, error));
  const send = async () => {
    const content = text.value.trim();
    if (!content) {
      error.textContent = "Write something first.";
      return;
    }
    go.disabled = true;
    error.textContent = "";
    try {
      await submit(content);
      text.value = "";
    } catch (problem) {
      error.textContent = problem.message;
    } finally {
      go.disabled = false;
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      send();
    }
  });
  return { form, error };
}
