// The operator's webhook deliveries (admin token): every batch event's deliveries, newest first, by state or batch;
// one delivery's attempts (time, status, latency, error) and the event it sends, with "Send again".
import { call } from "./api.js";
import {
  announce, confirmDialog, errorBox, every, h, keepFocus, localTime, replace, shortId, table, unlessTransient,
} from "./ui.js";

const STATES = [["", "any"], ["pending", "pending"], ["delivered", "delivered"], ["failed", "failed"]];
const BADGE = { pending: "running", delivered: "completed", failed: "discarded" }; // the batch states' colours

export function webhooksView(main, route, session) {
  if (session.role !== "admin") {
    replace(main, h("h1", { tabindex: "-1" }, "Webhooks"),
      h("p", {}, "Webhook deliveries need the admin token. Sign out and sign in with RELAY_ADMIN_TOKEN."));
    return () => {};
  }
  const id = route.path[1];
  return id ? deliveryView(main, id) : listView(main, route);
}

function listView(main, route) {
  const current = { state: route.query.get("state") || "", batch_id: route.query.get("batch_id") || "" };
  const cursor = route.query.get("cursor") || "";
  const box = h("div", { id: "deliveries" }, h("p", {}, "Loading…"));
  replace(main, h("h1", { tabindex: "-1" }, "Webhooks"),
    h("p", {}, "One event is sent when a batch ends, to each webhook of its project and team and to its callback_url. "
      + "A delivery is retried with backoff until its receiver answers 2xx, then it is delivered, or it gives up."),
    filterForm(current), box);
  return every(3000, async () => {
    try {
      const page = await call("/admin/webhooks/deliveries", { query: { ...current, cursor, limit: 50 } });
      keepFocus(box, () => renderList(box, page, current));
    } catch (err) {
      replace(box, errorBox(unlessTransient(err))); // a transient one keeps the page as it is and asks again
    }
  });
}

function filterForm(current) {
  const form = h("form", { class: "form inline", id: "webhook-filters" },
    h("div", { class: "field" }, h("label", { for: "w-state" }, "State"), h("select", { id: "w-state", name: "state" },
      STATES.map(([v, text]) => h("option", { value: v, selected: v === current.state }, text)))),
    h("div", { class: "field" }, h("label", { for: "w-batch" }, "Batch id"),
      h("input", { id: "w-batch", name: "batch_id", value: current.batch_id, placeholder: "UUID, batch_… or msgbatch_…",
        autocomplete: "off" })),
    h("button", { type: "submit", class: "button" }, "Filter"),
    h("a", { href: "#/webhooks", class: "button subtle" }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = { state: form.elements.state.value, batch_id: form.elements.batch_id.value.trim() };
    window.location.hash = `#/webhooks?${new URLSearchParams(Object.entries(values).filter(([, v]) => v))}`;
  });
  return form;
}

function renderList(box, page, current) {
  const rows = page.data.map((d) => h("tr", { dataset: { delivery: d.id } },
    h("td", {}, h("a", { href: `#/webhooks/${d.id}` }, h("code", {}, shortId(d.id)))), h("td", {}, localTime(d.created_at)),
    h("td", {}, h("code", {}, d.event_type)), h("td", {}, h("code", { title: d.batch_id }, shortId(d.batch_id))),
    h("td", {}, d.destination), h("td", {}, badge(d.state)), h("td", { class: "num" }, String(d.attempts)),
    h("td", {}, lastOutcome(d)), h("td", {}, d.state === "pending" ? localTime(d.next_attempt_at) : "—")));
  const more = page.next_cursor
    ? h("p", {}, h("a", { href: `#/webhooks?${new URLSearchParams({ ...dropEmpty(current), cursor: page.next_cursor })}` },
      "Older deliveries"))
    : null;
  replace(box, rows.length
    ? table(["Delivery", "Created", "Event", "Batch", "Destination", "State", "Attempts", "Last outcome", "Next attempt"],
      rows, "Webhook deliveries, newest first")
    : h("p", { class: "empty" }, "No delivery matches."), more);
}

function deliveryView(main, id) {
  const box = h("div", { id: "delivery" }, h("p", {}, "Loading…"));
  replace(main, h("h1", { tabindex: "-1" }, "Webhook delivery"), h("p", {}, h("a", { href: "#/webhooks" }, "All deliveries")),
    box);
  return every(2000, async () => {
    try {
      const delivery = await call(`/admin/webhooks/deliveries/${encodeURIComponent(id)}`);
      keepFocus(box, () => renderDelivery(box, delivery));
    } catch (err) {
      replace(box, errorBox(unlessTransient(err)));
      return err.status !== 404;
    }
  });
}

function renderDelivery(box, d) {
  const again = h("button", { type: "button", class: "button", id: "send-again" }, "Send again");
  again.addEventListener("click", () => sendAgain(box, d));
  const attempts = attemptRows(d.attempt_log);
  replace(box,
    h("dl", { class: "facts wide" },
      h("dt", {}, "State"), h("dd", { id: "delivery-state" }, badge(d.state)),
      h("dt", {}, "Event"), h("dd", {}, h("code", {}, d.event_type), " ", h("code", {}, d.event_id),
        h("span", { class: "muted" }, " (the webhook-id of every attempt)")),
      h("dt", {}, "Batch"), h("dd", {}, h("code", {}, d.batch_id)),
      h("dt", {}, "Destination"), h("dd", {}, d.destination, " ", h("code", {}, d.url)),
      h("dt", {}, "Created"), h("dd", {}, localTime(d.created_at)),
      h("dt", {}, d.state === "pending" ? "Next attempt" : "Ended"),
      h("dd", {}, localTime(d.state === "pending" ? d.next_attempt_at : d.finished_at))),
    h("div", { class: "actions" }, again),
    h("h2", {}, "Attempts"),
    attempts.length ? table(["#", "Started", "Status", "Latency", "Outcome"], attempts, "Delivery attempts, oldest first")
      : h("p", { class: "empty" }, "No attempt yet."),
    h("h2", {}, "Event body"), h("pre", { class: "json", id: "event-body" }, JSON.stringify(d.event, null, 2)));
}

async function sendAgain(box, d) {
  const yes = await confirmDialog({ title: "Send this event again?", yes: "Send again", no: "Keep as it is",
    body: `The receiver gets the same event with the same webhook-id (${d.event_id}); it should ignore a duplicate.` });
  if (!yes) return;
  try {
    renderDelivery(box, await call(`/admin/webhooks/deliveries/${encodeURIComponent(d.id)}/send-again`, { method: "POST" }));
    announce("Delivery queued to be sent again");
  } catch (err) {
    box.prepend(errorBox(err));
  }
}

// A delivery's attempts as table rows, oldest first (also the batch page's, app/console/static/deliveries.js).
export function attemptRows(log) {
  return log.map((a) => h("tr", { dataset: { attempt: String(a.n) } },
    h("td", { class: "num" }, String(a.n)), h("td", {}, localTime(a.started_at)),
    h("td", { class: "num" }, a.status === null ? "—" : String(a.status)),
    h("td", { class: "num" }, a.latency_ms === null ? "—" : `${Math.round(a.latency_ms)} ms`),
    h("td", {}, a.error || (a.status ? "delivered" : "in progress"))));
}

export function badge(state) {
  return h("span", { class: `badge state-${BADGE[state] || state}`, dataset: { state } }, state);
}

function lastOutcome(d) {
  if (d.last_error) return h("span", { title: d.last_error }, d.last_error.length > 60 ? `${d.last_error.slice(0, 60)}…` : d.last_error);
  return d.last_status ? `HTTP ${d.last_status}` : "—";
}

function dropEmpty(values) {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v));
}
