// A batch's items on its page: filtered by state or searched by custom_id, with their custom_ids when the batch
// has them (batches of the OpenAI and Anthropic APIs), their error texts, and one item read whole (its request and
// response) below the table.
import { call } from "./api.js";
import { ITEM_STATES, errorBox, h, localTime, replace, stateBadge, table } from "./ui.js";

// The items section: filters, the search, the table of this page of items, and the pager.
export function itemSection(batch, context) {
  const { id, state, customId } = context;
  const keyed = batch.api !== "relay" || batch.items.some((item) => item.custom_id);
  const what = customId ? `items whose custom_id starts with "${customId}"` : state ? `${state} items` : "items";
  return h("section", { "aria-labelledby": "items-h" }, h("h2", { id: "items-h" }, "Items"),
    stateFilter(batch, id, state),
    keyed ? searchForm(id, state, customId) : null,
    batch.items.length ? table(headers(keyed), batch.items.map((item) => itemRow(item, keyed, context)),
      `The batch's ${what}`) : h("p", { class: "empty" }, `No ${what} here.`),
    pager(batch, context));
}

function headers(keyed) {
  return ["#", ...(keyed ? ["custom_id"] : []), "State", "Model", "Started", "Finished", "Error", "Item"];
}

function itemRow(item, keyed, context) {
  return h("tr", { dataset: { idx: String(item.idx) } },
    h("td", {}, String(item.idx)),
    keyed ? h("td", { class: "custom-id" }, item.custom_id ? h("code", {}, item.custom_id) : "—") : null,
    h("td", {}, stateBadge(item.state)), h("td", {}, item.model || "—"),
    h("td", {}, localTime(item.started_at)), h("td", {}, localTime(item.finished_at)),
    h("td", { class: "error-cell" }, item.error
      ? h("details", { dataset: { idx: String(item.idx) } },
        h("summary", { dataset: { key: `item-${item.idx}` } }, item.error_code || "error"),
        h("p", { class: "error-text" }, item.error))
      : "—"),
    h("td", {}, h("button", {
      type: "button", class: "button small", dataset: { view: String(item.idx), key: `view-${item.idx}` },
      onclick: () => showItem(context, item.idx),
    }, item.state === "completed" ? "View response" : "View request")));
}

function itemsHref(id, params) {
  const kept = Object.fromEntries(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  const query = new URLSearchParams(kept).toString();
  return `#/batches/${id}${query ? `?${query}` : ""}`;
}

function stateFilter(batch, id, current) {
  const link = (state, label, n) => h("a", {
    href: itemsHref(id, { state }), "aria-current": current === state ? "page" : null,
    class: state ? `filter state-${state}` : "filter",
  }, `${label} (${n})`);
  return h("nav", { class: "filters", "aria-label": "Show items in one state" },
    link("", "All", batch.total), ...ITEM_STATES.map((s) => link(s, s, batch.counts[s] || 0)));
}

function searchForm(id, state, customId) {
  const form = h("form", { class: "form inline", id: "item-search", role: "search" },
    h("div", { class: "field" }, h("label", { for: "custom-id" }, "Find items by custom_id"),
      h("input", { id: "custom-id", name: "custom_id", value: customId, placeholder: "the start of a custom_id",
        autocomplete: "off", spellcheck: "false" })),
    h("button", { type: "submit", class: "button" }, "Find"),
    customId ? h("a", { href: itemsHref(id, { state }), class: "button subtle" }, "Show all") : null);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    window.location.hash = itemsHref(id, { state, custom_id: form.elements.custom_id.value.trim() });
  });
  return form;
}

function pager(batch, { id, state, customId, after }) {
  const href = (a) => itemsHref(id, { state, custom_id: customId, after: a });
  return h("nav", { class: "pager", "aria-label": "Item pages" },
    after !== "-1" ? h("a", { href: href(-1) }, "← First items") : null,
    batch.items_next_after !== null && batch.items_next_after !== undefined
      ? h("a", { href: href(batch.items_next_after) }, "Next items →") : null);
}

// One item whole, in the panel under the table: its state and error, the request body, and the response.
async function showItem({ id, base, itemView }, idx) {
  itemView.hidden = false;
  replace(itemView, h("p", { role: "status" }, `Loading item ${idx}…`));
  let item;
  try {
    item = await call(`${base}/${encodeURIComponent(id)}/items/${idx}`);
  } catch (err) {
    replace(itemView, errorBox(err));
    return;
  }
  const json = (value) => h("pre", {}, value === null ? "—" : JSON.stringify(value, null, 2));
  replace(itemView,
    h("h2", { id: "item-view-h", tabindex: "-1" }, `Item ${item.idx}`, item.custom_id ? [" · ", h("code", {},
      item.custom_id)] : null, " · ", stateBadge(item.state)),
    item.error ? h("p", { class: "error-text" }, `${item.error_code || "error"}: ${item.error}`) : null,
    h("h3", {}, "Request"), json(item.request),
    h("h3", {}, "Response"), item.state === "completed" ? json(item.response)
      : h("p", { class: "muted" }, "Only a completed item has a response (a failed one keeps its error text)."),
    h("button", { type: "button", class: "button subtle", onclick: () => { itemView.hidden = true; } }, "Close"));
  itemView.querySelector("h2").focus();
}
