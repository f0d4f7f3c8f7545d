// Batches: the list (newest first, paged, live progress) and one batch (counts, timings, attribution, items by
// state with their errors, downloads, cancel). The same views serve a caller (/v1/batches) and the operator
// (/admin/batches, every owner's batches).
import { call } from "./api.js";
import {
  ITEM_STATES, announce, batchState, confirmDialog, duration, errorBox, every, h, keepFocus, localTime, progress, replace,
  saveResponse, shortId, stateBadge, table,
} from "./ui.js";

const PAGE = 20;
const ITEMS_PAGE = 50;
const REFRESH_MS = 2000;

export function basePath(role) {
  return role === "admin" ? "/admin/batches" : "/v1/batches";
}

// A caller's batch routes answer in Relay's own view only when asked (else OpenAI's for its batches).
function view(role) {
  return role === "admin" ? {} : { format: "relay" };
}

// A live table of batches at LISTPATH with QUERY; PAGER builds the href of another page from a cursor.
export function liveBatchList(container, { role, query, pager, caption }) {
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
      replace(body, errorBox(err));
      return false;
    }
    const details = await Promise.all(page.data.map((b) => finished.get(b.id)
      || call(`${base}/${b.id}`, { query: { limit: 0, ...view(role) } }).then((d) => ({ ...b, ...d })).catch(() => b)));
    details.filter((d) => d.finished).forEach((d) => finished.set(d.id, d));
    renderList(body, details, { role, caption, next: page.next_cursor, pager, first: !query.cursor });
    replace(status, "Updated ", localTime(new Date().toISOString()),
      details.some((d) => !d.finished) ? " · updating every 2 s while batches run" : "");
    return !query.cursor || details.some((d) => !d.finished);
  });
}

function renderList(body, batches, { role, caption, next, pager, first }) {
  const admin = role === "admin";
  const headers = ["Created", "Batch", ...(admin ? ["Principal", "Policy"] : []), "Shape", "State", "Progress"];
  const rows = batches.map((b) => h("tr", { dataset: { batch: b.id } },
    h("td", {}, localTime(b.created_at)),
    h("td", {}, h("a", { href: `#/batches/${b.id}`, title: b.id }, h("code", {}, shortId(b.id)))),
    admin ? h("td", {}, b.principal || b.principal_id || "—") : null,
    admin ? h("td", {}, b.policy || b.policy_id) : null,
    h("td", {}, b.shape),
    h("td", {}, stateBadge(batchState(b))),
    h("td", { class: "progress-cell" }, b.counts ? progress(b) : `${b.total} items`)));
  const empty = h("p", { class: "empty" }, first ? "No batches yet." : "No older batches.");
  const pages = h("nav", { class: "pager", "aria-label": "Pages" },
    first ? null : h("a", { href: pager(null) }, "← Newest"),
    next ? h("a", { href: pager(next), rel: "next" }, "Older batches →") : null);
  keepFocus(body, () => replace(body, batches.length ? table(headers, rows, caption) : empty, pages));
}

export function batchesView(main, route) {
  const cursor = route.query.get("cursor") || "";
  const list = h("div");
  replace(main, h("h1", { tabindex: "-1" }, "Your batches"),
    h("p", {}, "Newest first. Progress updates live while a batch runs. ", h("a", { href: "#/submit" }, "Submit a batch")),
    list);
  return liveBatchList(list, {
    role: "caller", query: { cursor }, caption: "Your batches, newest first",
    pager: (c) => (c ? `#/batches?cursor=${encodeURIComponent(c)}` : "#/batches"),
  });
}

// One batch, refreshed every 2 s until every item is final.
export function batchView(main, route, session) {
  const id = route.path[1];
  const base = basePath(session.role);
  const state = route.query.get("state") || "";
  const after = route.query.get("after") || "-1";
  const heading = h("h1", { tabindex: "-1" }, "Batch ", h("code", {}, id));
  const body = h("div");
  const actions = h("div", { class: "actions" });
  const actionStatus = h("p", { role: "status", class: "small" });
  replace(main, heading, body);
  const top = h("div");
  const rest = h("div");
  let last = "";
  let built = false;
  let stop = () => {};
  const refresh = async () => {
    let batch;
    try {
      batch = await call(`${base}/${encodeURIComponent(id)}`, { query: { state, after, limit: ITEMS_PAGE, ...view(session.role) } });
    } catch (err) {
      const hint = err.code === "batch_not_found"
        ? h("p", {}, "No batch with this id is visible to you: it does not exist or another caller submitted it.")
        : null;
      replace(body, errorBox(err, hint));
      built = false;
      return false;
    }
    const signature = JSON.stringify(batch);
    if (signature === last) return !batch.finished;
    last = signature;
    if (!built) {
      buildActions(actions, actionStatus, batch, base, () => { stop(); stop = every(REFRESH_MS, refresh); });
      replace(body, top, actions, actionStatus, rest);
      built = true;
    }
    updateActions(actions, batch);
    keepFocus(body, () => renderBatch(top, rest, batch, { state, after, id }));
    return !batch.finished;
  };
  stop = every(REFRESH_MS, refresh);
  return () => stop();
}

function renderBatch(top, rest, batch, { state, after, id }) {
  const openItem = rest.querySelector("details[open]");
  const reopen = openItem ? openItem.dataset.idx : null;
  replace(top, h("p", { class: "lead" }, "State: ", stateBadge(batchState(batch)), " · ",
    `${batch.total} items, shape ${batch.shape}`), progress(batch));
  replace(rest,
    h("div", { class: "columns" },
      h("section", { "aria-labelledby": "counts-h" }, h("h2", { id: "counts-h" }, "Counts"), counts(batch)),
      h("section", { "aria-labelledby": "timings-h" }, h("h2", { id: "timings-h" }, "Timings"), timings(batch)),
      h("section", { "aria-labelledby": "attr-h" }, h("h2", { id: "attr-h" }, "Attribution"), attribution(batch))),
    batch.metadata ? h("section", {}, h("h2", {}, "Metadata"), h("pre", {}, JSON.stringify(batch.metadata, null, 2)))
      : null,
    h("section", { "aria-labelledby": "items-h" }, h("h2", { id: "items-h" }, "Items"),
      stateFilter(batch, id, state), items(batch, id, state, after)));
  if (reopen !== null) {
    const again = rest.querySelector(`details[data-idx="${reopen}"]`);
    if (again) again.open = true;
  }
}

function dl(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function counts(batch) {
  return dl([["Total", String(batch.total)], ...ITEM_STATES.map((s) => [s, String(batch.counts[s] || 0)])]);
}

function timings(batch) {
  const end = batch.finished_at || new Date().toISOString();
  return dl([
    ["Created", localTime(batch.created_at)],
    ["Finished", batch.finished ? localTime(batch.finished_at) : "not yet"],
    ["Cancelled", batch.cancelled_at ? localTime(batch.cancelled_at) : "no"],
    [batch.finished ? "Took" : "Running for", duration(batch.created_at, end)],
  ]);
}

function attribution(batch) {
  const principal = batch.principal_kind ? `${batch.principal_kind} ${batch.principal_id}` : "—";
  return dl([
    ["Policy", h("code", {}, batch.policy_id)],
    ["Project", batch.project_id ? h("code", {}, batch.project_id) : "—"],
    ["Team", batch.team_id ? h("code", {}, batch.team_id) : "—"],
    ["Principal", principal],
    ["Credential", `${batch.credential_kind} ${batch.credential_id}`],
  ]);
}

function stateFilter(batch, id, current) {
  const link = (state, label, n) => h("a", {
    href: `#/batches/${id}${state ? `?state=${state}` : ""}`, "aria-current": current === state ? "page" : null,
    class: state ? `filter state-${state}` : "filter",
  }, `${label} (${n})`);
  return h("nav", { class: "filters", "aria-label": "Show items in one state" },
    link("", "All", batch.total), ...ITEM_STATES.map((s) => link(s, s, batch.counts[s] || 0)));
}

function items(batch, id, state, after) {
  const query = (a) => `#/batches/${id}?${new URLSearchParams({ ...(state ? { state } : {}), after: a })}`;
  const rows = batch.items.map((item) => h("tr", {},
    h("td", {}, String(item.idx)), h("td", {}, stateBadge(item.state)), h("td", {}, item.model || "—"),
    h("td", {}, localTime(item.started_at)), h("td", {}, localTime(item.finished_at)),
    h("td", { class: "error-cell" }, item.error
      ? h("details", { dataset: { idx: String(item.idx) } },
        h("summary", { dataset: { key: `item-${item.idx}` } }, item.error_code || "error"),
        h("p", { class: "error-text" }, item.error))
      : "—")));
  const pages = h("nav", { class: "pager", "aria-label": "Item pages" },
    after !== "-1" ? h("a", { href: query(-1) }, "← First items") : null,
    batch.items_next_after !== null && batch.items_next_after !== undefined
      ? h("a", { href: query(batch.items_next_after) }, "Next items →") : null);
  const what = state ? `${state} items` : "items";
  return [batch.items.length ? table(["#", "State", "Model", "Started", "Finished", "Error"], rows, `The batch's ${what}`)
    : h("p", { class: "empty" }, `No ${what} here.`), pages];
}

function buildActions(actions, status, batch, base, restart) {
  const download = (format) => h("button", {
    type: "button", class: "button", dataset: { download: format },
    onclick: async () => {
      const name = `batch-${batch.id}.${format}`;
      try {
        const response = await call(`${base}/${batch.id}/results`, { query: { format }, raw: true });
        const size = await saveResponse(response, name);
        replace(status, `Saved ${name} (${size} bytes).`);
      } catch (err) {
        replace(status, errorBox(err));
      }
    },
  }, `Download results (${format.toUpperCase()})`);
  const cancel = h("button", {
    type: "button", class: "button danger", id: "cancel-batch",
    onclick: async () => {
      const yes = await confirmDialog({
        title: "Cancel this batch?",
        body: `Batch ${batch.id}: queued items will never run and running items are stopped. This cannot be undone.`,
        yes: "Cancel the batch", no: "Keep it running",
      });
      if (!yes) return;
      try {
        const after = await call(`${base}/${batch.id}/cancel`, { method: "POST", query: view(base === basePath("admin") ? "admin" : "caller") });
        replace(status, `Batch cancelled: ${after.counts.cancelled} items cancelled.`);
        announce("Batch cancelled");
        restart();
      } catch (err) {
        replace(status, errorBox(err));
      }
    },
  }, "Cancel batch…");
  replace(actions, download("json"), download("jsonl"), cancel);
}

function updateActions(actions, batch) {
  const cancel = actions.querySelector("#cancel-batch");
  const over = batch.finished || batch.status === "cancelled";
  cancel.disabled = over;
  cancel.title = over ? "Nothing left to cancel" : "";
}
