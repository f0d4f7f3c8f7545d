// The submitter's own webhook deliveries of a batch (GET /v1/batches/{id}/webhooks), on the batch page: each
// destination's state and every attempt (time, status, latency, error). Loaded when opened, again on Refresh.
import { call } from "./api.js";
import { errorBox, h, localTime, replace, table } from "./ui.js";
import { attemptRows, badge } from "./webhooks.js";

export function deliveriesSection(batchId) {
  const box = h("div", { id: "batch-deliveries" });
  const load = async () => {
    replace(box, h("p", {}, "Loading…"));
    try {
      const page = await call(`/v1/batches/${encodeURIComponent(batchId)}/webhooks`);
      replace(box, render(page.data));
    } catch (err) {
      replace(box, errorBox(err));
    }
  };
  const refresh = h("button", { type: "button", class: "button subtle", id: "refresh-deliveries", onclick: load },
    "Refresh");
  const details = h("details", { id: "batch-webhooks" }, h("summary", {}, "Webhook deliveries"),
    h("p", { class: "small" }, "When the batch ends, an event is sent to its project's and team's webhooks and to"
      + " its callback_url; each delivery is retried until its receiver answers 2xx, or it gives up."), refresh, box);
  details.addEventListener("toggle", () => { if (details.open) load(); });
  return details;
}

function render(deliveries) {
  if (!deliveries.length) {
    return h("p", { class: "empty" }, "No delivery: no webhook wants this batch's events, or the batch has not ended.");
  }
  return deliveries.map((d) => h("section", { class: "delivery", dataset: { delivery: d.id } },
    h("h3", {}, `${d.destination} `, h("code", {}, d.url), " ", badge(d.state)),
    h("p", { class: "small muted" }, h("code", {}, d.event_type), ` · ${d.attempts} attempts · created `,
      localTime(d.created_at), d.state === "pending" && d.next_attempt_at
        ? [" · next attempt ", localTime(d.next_attempt_at)] : null),
    d.attempt_log.length
      ? table(["#", "Started", "Status", "Latency", "Outcome"], attemptRows(d.attempt_log), "Attempts, oldest first")
      : h("p", { class: "empty" }, "No attempt yet.")));
}
