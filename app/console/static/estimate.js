// The estimate of a batch before it is submitted (`POST /v1/batches/estimate`): items per model and where they
// would run, an upper bound of cost against the spend cap, and how long the batch takes under the policy's rate
// limits today, paced (at its batch share) or not (how many items the current windows would discard rate_limited),
// and whether the items can all start within the deadline (completion_window).
import { h, replace, table, usd } from "./ui.js";

export function showEstimate(region, estimate) {
  const rows = estimate.models.map((m) => h("tr", { dataset: { model: m.model } },
    h("td", {}, m.model), h("td", { class: "num" }, String(m.items)),
    h("td", {}, m.runs ? `${m.binding.host} / ${m.binding.upstream_model}`
      : h("span", { class: "muted" }, `not run: ${m.problem ? m.problem.code : "discarded"}`)),
    h("td", { class: "cost" }, modelCost(m))));
  replace(region, h("h2", { id: "estimate-h" }, "Estimate"),
    h("p", { class: "lead", id: "estimate-cost" }, costText(estimate)),
    capText(estimate),
    table(["Model", "Items", "Runs on", "Cost at most"], rows, "The batch's items by model"),
    timing(estimate.timing),
    deadline(estimate.deadline, estimate.total),
    h("p", { class: "muted small" }, "Nothing is stored or run until you press Submit. The bound counts a token per "
      + "request byte and each item's output limit (or its model's)."));
}

function modelCost(m) {
  if (!m.runs) return "—";
  if (m.cost_usd_max !== null) return usd(m.cost_usd_max);
  return m.priced ? "no bound" : "unpriced";
}

function costText(estimate) {
  const items = `${estimate.total} item${estimate.total === 1 ? "" : "s"}`;
  if (estimate.cost_usd_max !== null) return [`${items}: cost at most `, h("strong", {}, usd(estimate.cost_usd_max))];
  const running = estimate.models.filter((m) => m.runs);
  const unpriced = running.filter((m) => !m.priced).map((m) => m.model);
  const unbounded = running.reduce((n, m) => n + (m.items_without_output_limit || 0), 0);
  const why = [...(unpriced.length ? [`unpriced: ${unpriced.join(", ")}`] : []),
    ...(unbounded ? [`${unbounded} item${unbounded === 1 ? " has" : "s have"} no output limit (max_tokens, or the `
      + "model's max_output_tokens)"] : [])];
  return `${items}: the cost has no upper bound (${why.join("; ") || "unknown"}). A spend cap bounds it.`;
}

function capText(estimate) {
  if (estimate.max_cost === null || estimate.max_cost === undefined) return null;
  const verdict = estimate.within_max_cost === null ? ""
    : estimate.within_max_cost ? ": the bound stays within it"
      : ": the cap may stop the batch (items not started end discarded budget_exceeded)";
  return h("p", { id: "estimate-cap", class: estimate.within_max_cost === false ? "warning" : null },
    `Spend cap ${usd(estimate.max_cost)}${verdict}.`);
}

function clock(seconds) {
  const s = Math.round(seconds);
  const parts = [[Math.floor(s / 3600), "h"], [Math.floor((s % 3600) / 60), "m"], [s % 60, "s"]];
  return parts.filter(([n], i) => n || i === 2).map(([n, unit]) => `${n}${unit}`).join(" ");
}

// Whether every item can start within the batch's completion_window under the policy's limits today (an item not
// started by then ends discarded expired): a warning with how many would be late and when the last would start.
function deadline(d, total) {
  if (!d) return null;
  if (d.meets) {
    return h("p", { id: "estimate-deadline" }, `Deadline ${d.completion_window}: every item can start within it.`);
  }
  const last = d.last_start_seconds === null ? "the last would never start"
    : `the last would start in about ${clock(d.last_start_seconds)}`;
  return h("p", { id: "estimate-deadline", class: "warning", role: "alert" }, h("strong", {}, "Deadline "
    + `${d.completion_window}: `), `${d.items_late} of ${total} item${total === 1 ? "" : "s"} would start too late `
    + `and end discarded expired (${last}). A longer deadline, or a policy with more room, lets them run.`);
}

// The policy's own way first (paced or not), the other way below it.
function timing(t) {
  if (!t) return null;
  if (!t.limited) {
    return h("p", { id: "estimate-timing" }, "Your policy has no rate limits: every item starts as fast as the "
      + "workers take it.");
  }
  const rate = t.items_per_minute !== null ? `, ${t.items_per_minute} items/min` : "";
  const paced = `Paced (${t.share} of the limits${rate}): `
    + (t.paced_seconds === null ? "a limit admits no batch item, so it would never finish."
      : `the last item starts in about ${clock(t.paced_seconds)}.`);
  const refused = t.unpaced_rate_limited_items;
  const unpaced = "Not paced: every item starts at once; " + (refused
    ? `${refused} of ${t.items} would be discarded rate_limited by the current windows.`
    : "the current windows refuse none.");
  const [mine, other] = t.policy_paced ? [paced, unpaced] : [unpaced, paced];
  return h("div", { id: "estimate-timing" },
    h("p", {}, h("strong", {}, t.policy_paced ? "Your policy paces batches. " : "Your policy does not pace batches. "),
      mine),
    h("p", { class: "muted small" }, `Were it otherwise — ${other}`));
}
