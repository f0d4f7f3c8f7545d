// Batches: the list (newest first, paged, live progress, filtered by state, searched by id or metadata). The same
// list serves a caller (/v1/batches) and the operator (/admin/batches, every owner's batches, more filters).
import { call } from "./api.js";
import {
  batchState, errorBox, every, h, keepFocus, localTime, progress, replace, shortId, stateBadge, table, unlessTransient,
  usd,
} from "./ui.js";

const PAGE = 20;
export const REFRESH_MS = 2000;
// The list's state filter as the API's status and finished arguments (the same words as the batch's state).
export const LIST_STATES = [["", "any"], ["active", "active (queued or running)"], ["done", "done"],
  ["cancelled", "cancelled"]];
const BY_STATE = { active: { status: "queued", finished: "false" }, done: { status: "queued", finished: "true" },
  cancelled: { status: "cancelled" } };
export const API_NAMES = { relay: "Relay", openai: "OpenAI", anthropic: "Anthropic" };

export function basePath(role) {
  return role === "admin" ? "/admin/batches" : "/v1/batches";
}

// A caller's batch routes answer in Relay's own view only when asked (else OpenAI's for its batches).
export function view(role) {
  return role === "admin" ? {} : { format: "relay" };
}

// The API's list arguments for the console's STATE and SEARCH filters.
export function filterQuery(state, search) {
  return { ...(BY_STATE[state] || {}), search };
}

// A batch's own name: `metadata.name`, when it has one.
export function batchName(batch) {
  const name = batch.metadata && batch.metadata.name;
  return typeof name === "string" && name ? name : null;
}

// What a batch cost, for a table cell: `$0.0012` (or `unpriced`) once finished, what its final items cost so far
// while it runs, `—` before anything cost.
export function batchCost(batch) {
  if (batch.usage) return usd(batch.usage.cost_usd);
  if (Number(batch.cost_usd) > 0) return h("span", { title: "the items final so far" }, `${usd(batch.cost_usd)} so far`);
  return h("span", { class: "muted", title: "known once items finish" }, "—");
}

// A live table of batches with QUERY; PAGER builds the href of another page from a cursor; FILTERED says whether
// a filter is set (an empty page then says that nothing matches, not that there are no batches).
export function liveBatchList(container, { role, query, pager, caption, filtered }) {
  const base = basePath(role);
  const finished = new Map();
  const status = h("p", { class: "muted small", role: "status" });
  const body = h("div");
  replace(container, body, status);
  return every(REFRESH_MS, async () => {
    let page;
    try {
      page = await call(base, { query: { limit: PAGE, ...view(role), ...query } });
    } catch (err) {
      replace(body, errorBox(unlessTransient(err)));
      return false;
    }
    const details = await Promise.all(page.data.map((b) => finished.get(b.id)
      || call(`${base}/${b.id}`, { query: { limit: 0, ...view(role) } }).then((d) => ({ ...b, ...d })).catch(() => b)));
    details.filter((d) => d.finished).forEach((d) => finished.set(d.id, d));
    renderList(body, details, { role, caption, next: page.next_cursor, pager, first: !query.cursor, filtered });
    replace(status, "Updated ", localTime(new Date().toISOString()),
      details.some((d) => !d.finished) ? " · updating every 2 s while batches run" : "");
    return !query.cursor || details.some((d) => !d.finished);
  });
}

function renderList(body, batches, { role, caption, next, pager, first, filtered }) {
  const admin = role === "admin";
  const headers = ["Created", "Batch", ...(admin ? ["Principal", "Policy"] : []), "API", "Shape", "State", "Progress",
    "Cost"];
  const rows = batches.map((b) => h("tr", { dataset: { batch: b.id } },
    h("td", {}, localTime(b.created_at)),
    h("td", {}, h("a", { href: `#/batches/${b.id}`, title: b.id }, batchName(b)
      ? [h("span", { class: "batch-name" }, batchName(b)), h("code", { class: "small" }, shortId(b.id))]
      : h("code", {}, shortId(b.id)))),
    admin ? h("td", {}, b.principal || b.principal_id || "—") : null,
    admin ? h("td", {}, b.policy || b.policy_id) : null,
    h("td", { dataset: { api: b.api } }, API_NAMES[b.api] || b.api),
    h("td", {}, b.shape),
    h("td", {}, stateBadge(batchState(b))),
    h("td", { class: "progress-cell" }, b.counts ? progress(b) : `${b.total} items`),
    h("td", { class: "num cost" }, batchCost(b))));
  const emptyText = filtered ? "No batch matches these filters." : first ? "No batches yet." : "No older batches.";
  const pages = h("nav", { class: "pager", "aria-label": "Pages" },
    first ? null : h("a", { href: pager(null) }, "← Newest"),
    next ? h("a", { href: pager(next), rel: "next" }, "Older batches →") : null);
  keepFocus(body, () => replace(body, batches.length ? table(headers, rows, caption)
    : h("p", { class: "empty" }, emptyText), pages));
}

// The filters of a list: FIELDS (name, label, hint) as text inputs, then the state and search; submitting goes to
// HASH with the values set.
export function filterForm(id, hash, current, fields = []) {
  const field = (name, label, hint) => h("div", { class: "field" }, h("label", { for: `f-${name}` }, label),
    h("input", { id: `f-${name}`, name, value: current[name] || "", placeholder: hint, autocomplete: "off" }));
  const form = h("form", { class: "form inline", id },
    fields.map(([name, label, hint]) => field(name, label, hint)),
    h("div", { class: "field" }, h("label", { for: "f-state" }, "State"), h("select", { id: "f-state", name: "state" },
      LIST_STATES.map(([v, text]) => h("option", { value: v, selected: v === (current.state || "") }, text)))),
    field("search", "Search", "batch id, or text in its metadata"),
    h("button", { type: "submit", class: "button" }, "Filter"),
    h("a", { href: hash, class: "button subtle" }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const names = [...fields.map(([name]) => name), "state", "search"];
    const values = Object.fromEntries(names.map((n) => [n, form.elements[n].value.trim()]).filter(([, v]) => v));
    window.location.hash = `${hash}?${new URLSearchParams(values)}`;
  });
  return form;
}

export function batchesView(main, route) {
  const current = { state: route.query.get("state") || "", search: route.query.get("search") || "" };
  const cursor = route.query.get("cursor") || "";
  const deleted = route.query.get("deleted");
  const list = h("div", { id: "caller-batches" });
  replace(main, h("h1", { tabindex: "-1" }, "Your batches"),
    deleted ? h("p", { class: "notice", role: "status" }, `Deleted batch ${deleted}.`) : null,
    h("p", {}, "Newest first. Progress updates live while a batch runs. ", h("a", { href: "#/submit" }, "Submit a batch")),
    filterForm("batch-filters", "#/batches", current), list);
  const kept = Object.fromEntries(Object.entries(current).filter(([, v]) => v));
  return liveBatchList(list, {
    role: "caller", query: { cursor, ...filterQuery(current.state, current.search) },
    caption: "Your batches, newest first", filtered: Object.keys(kept).length > 0,
    pager: (c) => `#/batches?${new URLSearchParams({ ...kept, ...(c ? { cursor: c } : {}) })}`,
  });
}
