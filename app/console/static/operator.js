// The operator's view (admin token): workers alive from their heartbeats, where items wait (Postgres before
// dispatch, then the RabbitMQ queue), a link to the RabbitMQ management UI, and every owner's batches with filters.
import { call } from "./api.js";
import { filterForm, filterQuery, liveBatchList } from "./batches.js";
import { errorBox, every, h, keepFocus, localTime, replace, table, unlessTransient } from "./ui.js";

const FIELDS = [["principal", "Principal", "name, user:NAME or id"], ["policy", "Policy", "name or id"],
  ["credential", "Credential id", "relay key or token id"]];
const FILTERS = [...FIELDS.map(([name]) => name), "state", "search"];

export function operatorView(main, route, session) {
  if (session.role !== "admin") {
    replace(main, h("h1", { tabindex: "-1" }, "Operator"),
      h("p", {}, "The operator view needs the admin token. Sign out and sign in with RELAY_ADMIN_TOKEN."));
    return () => {};
  }
  const fleet = h("div", { id: "fleet" }, h("p", {}, "Loading…"));
  const list = h("div", { id: "operator-batches" });
  const current = Object.fromEntries(FILTERS.map((f) => [f, route.query.get(f) || ""]));
  replace(main, h("h1", { tabindex: "-1" }, "Operator"),
    h("section", { "aria-labelledby": "fleet-h" }, h("h2", { id: "fleet-h" }, "Workers and queue"), fleet),
    h("section", { "aria-labelledby": "all-h" }, h("h2", { id: "all-h" }, "Every batch"),
      filterForm("operator-filters", "#/operator", current, FIELDS), list));
  const stopFleet = every(3000, async () => {
    try {
      const status = await call("/admin/workers");
      keepFocus(fleet, () => renderFleet(fleet, status));
    } catch (err) {
      replace(fleet, errorBox(unlessTransient(err)));
    }
  });
  const kept = dropEmpty(current);
  const stopList = liveBatchList(list, {
    role: "admin", query: { ...listQuery(current), cursor: route.query.get("cursor") || "" },
    caption: "Every batch, newest first", filtered: Object.keys(kept).length > 0,
    pager: (c) => `#/operator?${new URLSearchParams({ ...kept, ...(c ? { cursor: c } : {}) })}`,
  });
  return () => {
    stopFleet();
    stopList();
  };
}

function dropEmpty(values) {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v));
}

// The console's filters as the API's arguments.
function listQuery({ principal, policy, credential, state, search }) {
  return { principal, policy, credential, ...filterQuery(state, search) };
}

function waitingText({ queued, unpublished, running }) {
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  return `${plural(queued, "item")} queued in Postgres (${unpublished} not yet published to RabbitMQ), `
    + `${running} running`;
}

function renderFleet(box, status) {
  const q = status.queue;
  const queueText = q.reachable
    ? `${q.messages} message${q.messages === 1 ? "" : "s"} waiting, ${q.consumers} consumer${q.consumers === 1 ? "" : "s"}`
    : "RabbitMQ cannot be reached";
  const ui = status.broker_ui_url
    ? h("a", { href: status.broker_ui_url, target: "_blank", rel: "noopener noreferrer" },
      "Open the RabbitMQ management UI")
    : h("span", { class: "muted" }, "RabbitMQ management UI: set RELAY_BROKER_UI_URL to link it here");
  const rows = status.workers.map((w) => h("tr", { dataset: { worker: w.id } },
    h("td", {}, h("code", {}, w.id)), h("td", {}, w.hostname), h("td", { class: "num" }, String(w.pid)),
    h("td", {}, h("span", { class: `badge ${w.alive ? "state-completed" : "state-discarded"}` },
      w.alive ? "alive" : "silent")),
    h("td", {}, `${Math.round(w.seen_ago_s)} s ago`), h("td", {}, localTime(w.started_at)),
    h("td", { class: "num" }, String(w.running))));
  replace(box,
    h("dl", { class: "facts wide" },
      h("dt", {}, "Workers alive"), h("dd", { id: "workers-alive" }, `${status.alive} of ${status.workers.length}`,
        h("span", { class: "muted" }, ` (silent after ${status.lost_after_s} s without a heartbeat)`)),
      h("dt", {}, "Items waiting"), h("dd", { id: "items-waiting" }, waitingText(status.items),
        h("p", { class: "muted small" }, "Items wait in Postgres until the dispatcher publishes them: a window at a "
          + "time, sized to the live workers' threads, each message holding up to 8 items. The queue's message count "
          + "(here and in the RabbitMQ UI) is that window, not the backlog.")),
      h("dt", {}, "Item queue"), h("dd", { id: "queue-depth" }, h("code", {}, q.name), ": ", queueText),
      h("dt", {}, "Broker"), h("dd", {}, ui)),
    rows.length ? table(["Worker", "Host", "PID", "State", "Last heartbeat", "Started", "Running items"], rows,
      "Worker processes") : h("p", { class: "empty" }, "No worker has sent a heartbeat."));
}
