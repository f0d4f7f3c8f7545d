// DOM helpers shared by the views. Text from the API only ever reaches the page as text nodes (never as HTML).
import { ApiError } from "./api.js";

export const ITEM_STATES = ["completed", "discarded", "cancelled", "running", "queued"];
const FINAL = ["completed", "discarded", "cancelled"];

// h("a", {href: "#/x", class: "btn"}, "text", child): an element; "on..." attributes are listeners.
export function h(tag, attrs = {}, ...children) {
  const svg = ["svg", "rect", "g", "line", "text", "title", "path"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.setAttribute("class", value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Run RENDER (which rebuilds CONTAINER) and give focus back to the link or control that had it, if it is still
// there: live refreshes must not throw a keyboard user back to the top of the page.
export function keepFocus(container, render) {
  const active = document.activeElement;
  const key = active && container.contains(active)
    ? active.getAttribute("href") || active.id || active.dataset.key : null;
  render();
  if (!key) return;
  const again = [...container.querySelectorAll("a[href], [id], [data-key]")]
    .find((el) => el.getAttribute("href") === key || el.id === key || el.dataset.key === key);
  if (again) again.focus();
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const pad = (n, width = 2) => String(n).padStart(width, "0");

// A time in the viewer's own zone, as YYYY-MM-DD HH:MM:SS, inside <time datetime="...">.
export function localTime(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const d = new Date(iso);
  const text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return h("time", { datetime: iso, title: `${iso} (UTC)` }, text);
}

export function viewerZone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "your local time";
}

export function duration(fromIso, toIso) {
  if (!fromIso || !toIso) return "—";
  let s = Math.max(0, Math.round((new Date(toIso) - new Date(fromIso)) / 1000));
  const parts = [];
  for (const [unit, size] of [["h", 3600], ["m", 60]]) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  parts.push(`${s}s`);
  return parts.join(" ");
}

// What a batch is doing, in words (the API's `status` says only queued or cancelled).
export function batchState(batch) {
  const counts = batch.counts || {};
  if (batch.status === "cancelled") return batch.finished ? "cancelled" : "cancelling";
  if (batch.finished) return "done";
  const started = (counts.running || 0) + FINAL.reduce((n, s) => n + (counts[s] || 0), 0);
  return started > 0 ? "running" : "queued";
}

export function stateBadge(state) {
  return h("span", { class: `badge state-${state}` }, state);
}

// The progress of a batch: a bar with one segment per item state, and the same numbers in words.
export function progress(batch) {
  const counts = batch.counts || {};
  const total = batch.total || 0;
  const done = FINAL.reduce((n, s) => n + (counts[s] || 0), 0);
  const pct = total ? Math.floor((100 * done) / total) : 0;
  const words = ITEM_STATES.map((s) => `${counts[s] || 0} ${s}`).join(", ");
  const bar = h("div", { class: "bar", role: "img", "aria-label": `${done} of ${total} items final: ${words}` });
  for (const state of ITEM_STATES) {
    const n = counts[state] || 0;
    if (!n) continue;
    const seg = h("span", { class: `seg state-${state}`, title: `${n} ${state}` });
    seg.style.width = `${(100 * n) / total}%`;
    bar.append(seg);
  }
  const text = h("p", { class: "progress-text" }, h("strong", {}, `${pct}% · ${done}/${total} final`),
    ...ITEM_STATES.map((s) => h("span", { class: `count count-${s}`, dataset: { state: s } },
      h("span", { class: `dot state-${s}`, "aria-hidden": "true" }), `${s} ${counts[s] || 0}`)));
  return h("div", { class: "progress", dataset: { done: String(done), total: String(total) } }, bar, text);
}

export function errorBox(err, extra) {
  const code = err && err.code ? err.code : "error";
  return h("div", { class: "error", role: "alert" },
    h("p", {}, h("strong", {}, "Error: "), err && err.message ? err.message : String(err), " ",
      h("code", {}, `(${code})`)), extra || fieldMessages(err && err.details));
}

// The per-field messages of a refused request ({"query": {"credential": ["Not a valid UUID."]}}), one a line.
function fieldMessages(details) {
  if (!details || typeof details !== "object" || Array.isArray(details)) return null;
  const lines = [];
  const walk = (value, path) => {
    if (Array.isArray(value)) value.forEach((v) => (typeof v === "object" ? walk(v, path) : lines.push(`${path}: ${v}`)));
    else if (value && typeof value === "object") Object.entries(value).forEach(([k, v]) => walk(v, path ? `${path}.${k}` : k));
    else lines.push(`${path}: ${value}`);
  };
  walk(details.query || details.json || details, "");
  return lines.length ? h("ul", { class: "problems" }, lines.map((line) => h("li", {}, line))) : null;
}

export function announce(text) {
  const region = document.getElementById("announce");
  region.textContent = "";
  window.setTimeout(() => { region.textContent = text; }, 50);
}

// A yes/no question in the page's <dialog> (modal: focus stays inside, Escape says no). TONE styles the yes button:
// "danger" (what cannot be undone) or "primary".
export function confirmDialog({ title, body, yes, no, tone = "danger" }) {
  const dialog = document.getElementById("confirm");
  replace(dialog.querySelector(".dialog-title"), title);
  replace(dialog.querySelector(".dialog-body"), body);
  dialog.querySelector("[value=yes]").textContent = yes;
  dialog.querySelector("[value=yes]").className = `button ${tone}`;
  dialog.querySelector("[value=no]").textContent = no;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), { once: true });
    dialog.showModal();
    dialog.querySelector("[value=no]").focus();
  });
}

// Save a Response's body as a file named NAME (the API needs the bearer header, so a plain link cannot do it).
export async function saveResponse(response, name) {
  const blob = await response.blob();
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: name, class: "hidden" });
  document.body.append(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
  return blob.size;
}

export function shortId(id) {
  return String(id).slice(0, 8);
}

// A table in a scrolling box; on a phone each row becomes a card whose cells carry their column's name.
export function table(headers, rows, caption) {
  for (const row of rows) {
    [...row.children].forEach((cell, i) => { cell.dataset.label = headers[i] || ""; });
  }
  return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption },
    h("table", {}, h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, rows)));
}

const FIRST_RETRY_MS = 2000;
const LONGEST_RETRY_MS = 30_000;

// Run FN now and every MS milliseconds until the returned stop() is called or FN returns false. When Relay does not
// answer (FN throws a transient ApiError: a restart, an outage), the page keeps what it shows, says so in the
// connection banner, and asks again after 2, 4, 8 ... 30 s; other errors are FN's to show.
export function every(ms, fn) {
  let stopped = false;
  let timer = null;
  let retry = 0;
  const tick = async () => {
    if (stopped) return;
    let again = true;
    let wait = ms;
    try {
      again = (await fn()) !== false;
      if (retry) connectionBack();
      retry = 0;
    } catch (err) {
      if (err instanceof ApiError && err.transient) {
        retry = Math.min(retry ? retry * 2 : FIRST_RETRY_MS, LONGEST_RETRY_MS);
        wait = retry;
        connectionLost(err, retry);
      } else {
        console.warn("refresh failed", err);
      }
    }
    if (!stopped && again) timer = window.setTimeout(tick, wait);
  };
  tick();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

// Rethrow ERR when it is a transient failure (every() retries those), else give it back to be shown.
export function unlessTransient(err) {
  if (err instanceof ApiError && err.transient) throw err;
  return err;
}

function connectionLost(err, waitMs) {
  const banner = document.getElementById("connection");
  banner.hidden = false;
  banner.className = "connection trouble";
  replace(banner, h("strong", {}, "Relay does not answer"), ` (${err.message}). Trying again in ${waitMs / 1000} s; `
    + "this page keeps what it shows and updates itself once Relay answers.");
}

function connectionBack() {
  const banner = document.getElementById("connection");
  banner.className = "connection back";
  replace(banner, "Relay answers again: this page is up to date.");
  window.setTimeout(() => { if (banner.classList.contains("back")) banner.hidden = true; }, 6000);
}

// Dollars for people: `$0.00585`, `$12.40`; `unpriced` when the cost is not known (null).
// Dollars for people: cents from $1 up, else three significant digits, never in exponent notation ($0.00000075).
export function usd(value) {
  if (value === null || value === undefined) return "unpriced";
  const n = Number(value);
  if (n === 0) return "$0";
  if (Math.abs(n) >= 1) return `$${n.toFixed(2)}`;
  const decimals = Math.min(12, 2 - Math.floor(Math.log10(Math.abs(n))));
  const [whole, fraction = ""] = n.toFixed(decimals).replace(/0+$/, "").split(".");
  return `$${whole}.${fraction.padEnd(2, "0")}`;
}
