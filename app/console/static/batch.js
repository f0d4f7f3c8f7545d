// One batch: state, counts, a paced batch's rate and expected finish, timings, cost and spend cap, attribution
// (names, ids on hover), metadata, its items (by state, or searched by custom_id, each readable whole), downloads,
// re-run of what failed, cancel and delete. Refreshed every 2 s until every item is final. The same page serves a
// caller (/v1/batches) and the operator (/admin/batches).
import { call } from "./api.js";
import { API_NAMES, REFRESH_MS, basePath, batchName, view } from "./batches.js";
import { deliveriesSection } from "./deliveries.js";
import { itemSection } from "./items.js";
import { rerunButton } from "./rerun.js";
import {
  ITEM_STATES, announce, batchState, confirmDialog, duration, errorBox, every, h, keepFocus, localTime, progress, replace,
  saveResponse, stateBadge, unlessTransient, usd,
} from "./ui.js";

const ITEMS_PAGE = 50;

export function batchView(main, route, session) {
  const id = route.path[1];
  const base = basePath(session.role);
  const params = { state: route.query.get("state") || "", after: route.query.get("after") || "-1",
    customId: route.query.get("custom_id") || "" };
  const heading = h("h1", { tabindex: "-1" }, "Batch ", h("code", {}, id));
  const body = h("div");
  const actions = h("div", { class: "actions" });
  const actionStatus = h("p", { role: "status", class: "small", id: "action-status" });
  const itemView = h("section", { id: "item-view", class: "item-view", "aria-live": "polite", hidden: true });
  replace(main, heading, body);
  const top = h("div");
  const rest = h("div");
  let last = "";
  let built = false;
  let stop = () => {};
  const refresh = async () => {
    let batch;
    try {
      batch = await call(`${base}/${encodeURIComponent(id)}`, {
        query: { state: params.state, after: params.after, limit: ITEMS_PAGE, custom_id: params.customId,
          ...view(session.role) },
      });
    } catch (err) {
      const hint = err.code === "batch_not_found"
        ? h("p", {}, "No batch with this id is visible to you: it does not exist or another caller submitted it.")
        : null;
      replace(body, errorBox(unlessTransient(err), hint));
      built = false;
      return false;
    }
    const signature = JSON.stringify(batch);
    if (signature === last) return !batch.finished;
    last = signature;
    if (!built) {
      buildActions(actions, actionStatus, batch, session.role, () => { stop(); stop = every(REFRESH_MS, refresh); });
      replace(body, top, actions, actionStatus, rest, itemView,
        session.role === "admin" ? null : deliveriesSection(id)); // the operator's are on the Webhooks page
      built = true;
    }
    replace(heading, "Batch ", batchName(batch) ? batchName(batch) : h("code", {}, id));
    updateActions(actions, batch);
    keepFocus(body, () => renderBatch(top, rest, batch, { ...params, id, base, itemView }));
    return !batch.finished;
  };
  stop = every(REFRESH_MS, refresh);
  return () => stop();
}

function renderBatch(top, rest, batch, context) {
  const openItem = rest.querySelector("details[open]");
  const reopen = openItem ? openItem.dataset.idx : null;
  replace(top, h("p", { class: "lead" }, "State: ", stateBadge(batchState(batch)), " · ",
    `${batch.total} items, shape ${batch.shape}, created through the ${API_NAMES[batch.api] || batch.api} API`),
  h("p", { class: "muted small" }, "Id ", h("code", {}, batch.id), batch.rerun_of ? [" · a re-run of ",
    h("a", { href: `#/batches/${batch.rerun_of}`, id: "rerun-of" }, h("code", {}, batch.rerun_of))] : null),
  progress(batch), pacingNote(batch));
  replace(rest,
    h("div", { class: "columns" },
      h("section", { "aria-labelledby": "counts-h" }, h("h2", { id: "counts-h" }, "Counts"), counts(batch)),
      h("section", { "aria-labelledby": "timings-h" }, h("h2", { id: "timings-h" }, "Timings"), timings(batch)),
      h("section", { "aria-labelledby": "cost-h" }, h("h2", { id: "cost-h" }, "Cost"), cost(batch)),
      h("section", { "aria-labelledby": "attr-h" }, h("h2", { id: "attr-h" }, "Attribution"), attribution(batch))),
    batch.metadata ? h("section", {}, h("h2", {}, "Metadata"), h("pre", {}, JSON.stringify(batch.metadata, null, 2)))
      : null,
    itemSection(batch, context));
  if (reopen !== null) {
    const again = rest.querySelector(`details[data-idx="${reopen}"]`);
    if (again) again.open = true;
  }
}

function dl(pairs, id) {
  return h("dl", { class: "facts", id }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function counts(batch) {
  return dl([["Total", String(batch.total)], ...ITEM_STATES.map((s) => [s, String(batch.counts[s] || 0)])]);
}

// A paced batch (its policy's `batch: {pace: true}`): how fast its limits let it run and when it should be done.
function pacingNote(batch) {
  const p = batch.pacing;
  if (!p) return null;
  const rate = p.items_per_minute === null ? "the rate no limit bounds" : `${p.items_per_minute} items/min`;
  const finish = p.expected_finish_at === null ? "never (a limit admits no batch item)"
    : localTime(new Date(p.expected_finish_at * 1000).toISOString());
  return h("p", { class: "pacing", id: "pacing" }, "Paced at ", h("strong", {}, rate),
    ` (${p.share} of the policy's limits, the rest is kept for live calls): ${p.waiting_items} items waiting, `
    + "expected to have started by ", finish, p.past_deadline
      ? h("strong", { class: "warning" }, " — after its deadline: items not started by then end discarded expired")
      : ".");
}

function timings(batch) {
  const end = batch.finished_at || new Date().toISOString();
  return dl([
    ["Created", localTime(batch.created_at)],
    ["Finished", batch.finished ? localTime(batch.finished_at) : "not yet"],
    ["Cancelled", batch.cancelled_at ? localTime(batch.cancelled_at) : "no"],
    [batch.finished ? "Took" : "Running for", duration(batch.created_at, end)],
    ...(batch.expires_at ? [["Deadline", [localTime(batch.expires_at), ` (${batch.completion_window})`]]] : []),
  ]);
}

function cost(batch) {
  const cap = batch.max_cost === null || batch.max_cost === undefined ? null
    : h("p", { id: "batch-cap" }, `Spend cap ${usd(batch.max_cost)} (${batch.max_cost_mode}): once reached, items `
      + "not started end discarded budget_exceeded.", batch.max_cost_overshoot
      ? h("span", { class: "muted small", id: "batch-cap-overshoot" }, ` Past the cap: ${batch.max_cost_overshoot}.`)
      : null);
  return [spent(batch), cap];
}

function spent(batch) {
  const u = batch.usage;
  if (!u) {
    return h("p", { class: "muted", id: "batch-cost" }, Number(batch.cost_usd) > 0
      ? `${usd(batch.cost_usd)} so far (its final items); tokens are counted once every item is final.`
      : "Known once items are final.");
  }
  return dl([
    ["Cost", h("strong", {}, usd(u.cost_usd))],
    ["Tokens in", String(u.input_tokens)], ["Tokens out", String(u.output_tokens)],
    ...(u.cached_tokens ? [["Cached", String(u.cached_tokens)]] : []),
    ...(u.unpriced ? [["Unpriced", `${u.unpriced} items (their model has no price)`]] : []),
  ], "batch-cost");
}

// A name where one is known (its id on hover), else the bare id.
function named(name, id) {
  if (!id) return "—";
  return name ? h("span", { title: id, dataset: { id } }, name) : h("code", {}, id);
}

function attribution(batch) {
  return dl([
    ["Policy", named(batch.policy, batch.policy_id)],
    ["Project", named(batch.project, batch.project_id)],
    ["Team", named(batch.team, batch.team_id)],
    ["Principal", batch.principal_kind ? [`${batch.principal_kind.replace("_", " ")} `,
      named(batch.principal, batch.principal_id)] : "—"],
    ["Credential", [`${batch.credential_kind.replace("_", " ")} `, named(batch.credential, batch.credential_id)]],
  ], "attribution");
}

function buildActions(actions, status, batch, role, restart) {
  const base = basePath(role);
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
        const after = await call(`${base}/${batch.id}/cancel`, { method: "POST", query: view(role) });
        replace(status, cancelledText(after));
        announce("Batch cancelled");
        restart();
      } catch (err) {
        replace(status, errorBox(err));
      }
    },
  }, "Cancel batch…");
  replace(actions, download("json"), download("jsonl"), role === "admin" ? null : rerunButton(batch, status), cancel,
    role === "admin" ? null : deleteButton(batch, status));
}

// What a cancel did, in the counts' own words: running items are still being stopped when it answers.
function cancelledText(after) {
  const c = after.counts;
  const ended = (c.completed || 0) + (c.discarded || 0);
  return `Batch cancelled: ${c.cancelled || 0} cancelled, ${c.running || 0} running being stopped (they end `
    + `cancelled), ${ended} had already ended (completed ${c.completed || 0}, discarded ${c.discarded || 0}).`;
}

// Delete (the submitter only): once nothing runs; its items and stored payloads go, its usage stays.
function deleteButton(batch, status) {
  return h("button", {
    type: "button", class: "button danger", id: "delete-batch",
    onclick: async () => {
      const yes = await confirmDialog({
        title: "Delete this batch?",
        body: `Batch ${batch.id}: its items, requests and responses are removed for good (its usage and cost stay`
          + " in the usage page). This cannot be undone.",
        yes: "Delete the batch", no: "Keep it",
      });
      if (!yes) return;
      try {
        await call(`/v1/batches/${batch.id}`, { method: "DELETE" });
        announce("Batch deleted");
        window.location.hash = `#/batches?${new URLSearchParams({ deleted: batch.id })}`;
      } catch (err) {
        replace(status, errorBox(err));
      }
    },
  }, "Delete batch…");
}

function updateActions(actions, batch) {
  const cancel = actions.querySelector("#cancel-batch");
  const over = batch.finished || batch.status === "cancelled";
  cancel.disabled = over;
  cancel.title = over ? "Nothing left to cancel" : "";
  const rerun = actions.querySelector("#rerun-batch");
  if (rerun) {
    const failed = (batch.counts.discarded || 0) + (batch.counts.cancelled || 0);
    rerun.disabled = !batch.finished || !failed;
    rerun.title = !batch.finished ? "A batch is re-run once every item is final"
      : failed ? "" : "Every item completed: nothing to re-run";
  }
  const remove = actions.querySelector("#delete-batch");
  if (remove) {
    remove.disabled = !batch.finished;
    remove.title = batch.finished ? "" : "A batch is deleted once every item is final (cancel it first)";
  }
}
