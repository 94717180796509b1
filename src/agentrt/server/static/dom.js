// Tiny DOM builder. Strings always become text nodes (never HTML), so content from the model,
// tools or the server cannot inject markup.

/**
 * h("button", {class: "x", type: "button", onclick: fn}, "Label", childNode)
 * Props: "class", "text", "dataset" (object), "on<event>" (listener), booleans set/omit the attribute,
 * anything else is an attribute set with setAttribute (only ever with names chosen by this code).
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

/** Append children (nodes, strings, arrays; null/false skipped). */
export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Replace all children of el. */
export function setChildren(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}
