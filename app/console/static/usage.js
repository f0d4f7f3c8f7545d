// Usage: requests and cost per day by model, as a stacked bar chart (plain SVG) and the same numbers in a table.
import { call } from "./api.js";
import { errorBox, every, h, replace, table, unlessTransient, usd } from "./ui.js";

const PALETTE = ["#0969da", "#bf3989", "#1a7f37", "#9a6700", "#8250df", "#cf222e", "#1b7c83", "#57606a"];
const MAX_MODELS = PALETTE.length - 1; // the rest are drawn together as "other models"
const W = 760;
const H = 260;
const M = { top: 12, right: 12, bottom: 36, left: 72 };

export function usageView(main, route, session) {
  const source = route.query.get("source") ?? "batch";
  const days = [7, 14, 30, 90].includes(Number(route.query.get("days"))) ? Number(route.query.get("days")) : 14;
  const metric = route.query.get("metric") === "requests" ? "requests" : "cost";
  const out = h("div", { "aria-live": "polite" }, h("p", {}, "Loading…"));
  const form = h("form", { class: "form inline", id: "usage-form" },
    select("source", "Source", [["batch", "batches"], ["live", "live requests"], ["", "all"]], source),
    select("days", "Days", [["7", "last 7"], ["14", "last 14"], ["30", "last 30"], ["90", "last 90"]], String(days)),
    select("metric", "Chart", [["cost", "cost (USD)"], ["requests", "requests"]], metric),
    h("button", { type: "submit", class: "button" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams({ source: form.elements.source.value, days: form.elements.days.value,
      metric: form.elements.metric.value });
    window.location.hash = `#/usage?${q}`;
  });
  const who = session.role === "admin" ? "every caller" : "your credential";
  replace(main, h("h1", { tabindex: "-1" }, "Usage"),
    h("p", {}, `Requests and cost per day by model for ${who}. Days are UTC days.`), form, out);
  return every(60_000, async () => {
    try {
      await load(out, { source, days, metric });
    } catch (err) {
      replace(out, errorBox(unlessTransient(err)));
    }
    return false; // drawn once (every() asks again while Relay does not answer)
  });
}

function select(name, label, options, value) {
  return h("div", { class: "field" }, h("label", { for: name }, label),
    h("select", { id: name, name }, options.map(([v, text]) => h("option", { value: v, selected: v === value }, text))));
}

async function load(out, { source, days, metric }) {
  const start = new Date();
  start.setUTCHours(0, 0, 0, 0);
  start.setUTCDate(start.getUTCDate() - (days - 1));
  const summary = await call("/v1/usage/summary",
    { query: { group_by: "model", bucket: "day", source, from: start.toISOString() } });
  const dayKeys = Array.from({ length: days }, (_, i) => new Date(start.getTime() + i * 86_400_000)
    .toISOString().slice(0, 10));
  const totals = new Map();
  summary.rows.forEach((r) => totals.set(r.model, (totals.get(r.model) || 0) + value(r, metric)));
  const ranked = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a));
  const shown = ranked.length > MAX_MODELS + 1 ? ranked.slice(0, MAX_MODELS) : ranked;
  const series = (model) => (shown.includes(model) ? model : "other models");
  const grid = new Map(dayKeys.map((d) => [d, new Map()]));
  for (const r of summary.rows) {
    const cell = grid.get(String(r.bucket).slice(0, 10));
    if (cell) cell.set(series(r.model), (cell.get(series(r.model)) || 0) + value(r, metric));
  }
  const names = [...shown, ...(shown.length < ranked.length ? ["other models"] : [])];
  const t = summary.totals;
  replace(out,
    h("p", { class: "lead" }, `${t.requests} requests · cost ${t.cost_usd === null ? "unknown" : usd(t.cost_usd)}`,
      t.unpriced ? ` · ${t.unpriced} unpriced (their cost is not known)` : "",
      t.cancelled ? ` · ${t.cancelled} cancelled` : ""),
    summary.rows.length ? [chart(dayKeys, grid, names, metric), legend(names), dataTable(summary.rows)]
      : h("p", { class: "empty" }, "No usage in this period."));
}

function value(row, metric) {
  return metric === "requests" ? row.requests : Number(row.cost_usd || 0);
}

// The value axis: round steps (1, 2, 2.5 or 5 times a power of ten; whole requests) up to a top at or above the
// peak, each labelled with as many decimals as its step needs (a 0.0111 peak tops at $0.015, never "$0.01").
export function ticks(peak, metric, wanted = 4) {
  const raw = Math.max(peak, Number.MIN_VALUE) / wanted;
  const power = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  if (metric === "requests") step = Math.max(1, Math.ceil(step));
  const count = Math.max(1, Math.ceil(peak / step - 1e-9));
  const decimals = metric === "requests" ? 0 : decimalsOf(step);
  const label = (v) => (metric === "requests" ? String(Math.round(v)) : `$${v.toFixed(decimals)}`);
  return Array.from({ length: count + 1 }, (_, i) => ({ value: i * step, label: label(i * step) }));
}

function decimalsOf(x) {
  let d = 0;
  while (d < 12 && Math.abs(Math.round(x * 10 ** d) - x * 10 ** d) > 1e-6) d += 1;
  return d;
}

function fmt(v, metric) {
  return metric === "requests" ? String(v) : usd(v);
}

function chart(dayKeys, grid, names, metric) {
  const peak = Math.max(...dayKeys.map((d) => [...grid.get(d).values()].reduce((a, b) => a + b, 0)), 0);
  const axis = ticks(peak || 1, metric);
  const top = axis[axis.length - 1].value;
  const plotW = W - M.left - M.right;
  const plotH = H - M.top - M.bottom;
  const step = plotW / dayKeys.length;
  const y = (v) => M.top + plotH - (v / top) * plotH;
  const svg = h("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-label": `${metric === "cost" ? "Cost" : "Requests"} per day by model, stacked; the table below has the numbers` });
  for (const { value, label } of axis) {
    svg.append(h("line", { x1: M.left, x2: W - M.right, y1: y(value), y2: y(value), class: "gridline" }),
      h("text", { x: M.left - 6, y: y(value) + 4, "text-anchor": "end", class: "axis tick" }, label));
  }
  const every = Math.ceil(dayKeys.length / 10);
  dayKeys.forEach((day, i) => {
    let base = 0;
    const x = M.left + i * step + step * 0.15;
    names.forEach((name, k) => {
      const v = grid.get(day).get(name) || 0;
      if (!v) return;
      svg.append(h("rect", { x, width: step * 0.7, y: y(base + v), height: y(base) - y(base + v),
        fill: PALETTE[k % PALETTE.length], class: "bar-seg" }, h("title", {}, `${day} ${name}: ${fmt(v, metric)}`)));
      base += v;
    });
    if ((dayKeys.length - 1 - i) % every === 0) { // the last day always has its label
      svg.append(h("text", { x: x + step * 0.35, y: H - M.bottom + 16, "text-anchor": "middle", class: "axis" },
        day.slice(5)));
    }
  });
  return h("figure", { class: "chart-box" }, svg);
}

function legend(names) {
  return h("ul", { class: "legend", "aria-label": "Models" }, names.map((name, k) => {
    const swatch = h("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.background = PALETTE[k % PALETTE.length];
    return h("li", {}, swatch, name);
  }));
}

function dataTable(rows) {
  const sorted = [...rows].sort((a, b) => String(b.bucket).localeCompare(String(a.bucket)) || b.requests - a.requests);
  return table(["Day (UTC)", "Model", "Requests", "Errors", "Cancelled", "Tokens in / out", "Cost (USD)"],
    sorted.map((r) => h("tr", { dataset: { model: r.model || "" } },
      h("td", {}, String(r.bucket).slice(0, 10)), h("td", {}, r.model || "—"),
      h("td", { class: "num" }, String(r.requests)), h("td", { class: "num errors" }, String(r.errors)),
      h("td", { class: "num cancelled" }, String(r.cancelled)),
      h("td", { class: "num" }, `${r.input_tokens} / ${r.output_tokens}`),
      h("td", { class: "num cost", title: r.cost_usd === null ? "no price is known for this model" : r.cost_usd },
        r.cost_usd === null ? "unpriced" : r.cost_usd))), "Usage per day and model");
}
