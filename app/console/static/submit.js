// Submit: a JSON Lines file and a shape. Two formats are told apart by their lines: Relay's (one request body a
// line, spliced into `POST /v1/batches` as they are) and OpenAI's batch input file (`custom_id`, `method`, `url`,
// `body` a line), which goes through the OpenAI-compatible Files and Batches API, so its results keep the
// custom_ids. The lines are checked to be JSON here (by line number); the API validates the whole batch and lists
// every bad item. Before the button is pressed, the page shows the API's estimate of the batch (items per model,
// an upper bound of cost, how long it takes under the policy's limits, paced or not): see estimate.js.
import { ApiError, call } from "./api.js";
import { showEstimate } from "./estimate.js";
import { SHAPE_OF_ENDPOINT, SHAPES } from "./shapes.js"; // served from Relay's shape registry (app/api/console.py)
import { errorBox, h, replace } from "./ui.js";

const OPENAI_LINE = ["custom_id", "method", "url", "body"];
const OPENAI_ENDPOINTS = Object.keys(SHAPE_OF_ENDPOINT);
const ESTIMATE_DELAY_MS = 300;

export function submitView(main, route, session) {
  if (session.role === "admin") {
    replace(main, h("h1", { tabindex: "-1" }, "Submit a batch"),
      h("p", {}, "The admin token cannot submit batches: sign in with a relay key or an inference token."));
    return () => {};
  }
  const result = h("div", { id: "submit-result", "aria-live": "polite" });
  const estimate = h("section", { id: "submit-estimate", class: "estimate", "aria-live": "polite",
    "aria-labelledby": "estimate-h", hidden: true });
  const form = h("form", { class: "form", id: "submit-form", novalidate: true },
    h("div", { class: "field" }, h("label", { for: "file" }, "Requests file (JSON Lines)"),
      h("input", { type: "file", id: "file", name: "file", required: true,
        accept: ".jsonl,.ndjson,.json,.txt,application/x-ndjson,application/jsonl,text/plain" })),
    h("div", { class: "field" }, h("label", { for: "shape" }, "Shape of every request (Relay's format)"),
      h("select", { id: "shape", name: "shape" }, SHAPES.map(([v, label]) => h("option", { value: v }, `${v} — ${label}`)))),
    h("div", { class: "field" }, h("label", { for: "metadata" }, "Metadata (optional JSON object; a \"name\" names the "
      + "batch in the lists)"),
    h("textarea", { id: "metadata", name: "metadata", rows: "2", placeholder: '{"name": "nightly evals"}' })),
    h("div", { class: "field" }, h("label", { for: "max-cost" }, "Spend cap in dollars (optional; Relay's format: "
      + "once the batch's recorded cost reaches it, items not started yet end discarded budget_exceeded)"),
    h("input", { type: "number", id: "max-cost", name: "max_cost", min: "0", step: "any", inputmode: "decimal",
      placeholder: "no cap" })),
    h("div", { class: "field" }, h("label", { for: "deadline" }, "Deadline (optional; Relay's format: a duration such "
      + "as 30m or 2h; items not started by then end discarded expired, and the estimate says how many would)"),
    h("input", { type: "text", id: "deadline", name: "completion_window", autocomplete: "off",
      placeholder: "no deadline" })),
    estimate,
    h("button", { type: "submit", class: "button primary" }, "Submit batch"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(form, result);
  });
  let timer = null;
  const later = () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => estimateForm(form, estimate), ESTIMATE_DELAY_MS);
  };
  for (const name of ["file", "shape", "metadata", "max_cost", "completion_window"]) {
    form.elements[name].addEventListener("change", later);
    form.elements[name].addEventListener("input", later);
  }
  replace(main, h("h1", { tabindex: "-1" }, "Submit a batch"),
    h("p", { id: "submit-expects" }, "The file is either Relay's format, one request body of the chosen shape a line "
      + "(without ", h("code", {}, "stream"), "), or an OpenAI batch input file, one ", h("code", {},
      "{custom_id, method, url, body}"), " a line, which is sent through the OpenAI-compatible API so results keep "
      + "your custom_ids. Relay checks the whole batch first: one bad item rejects it, and every problem is listed "
      + "below."),
    form, result);
  return () => {};
}

// What the form asks for, read and checked: { file, lines, metadata, rawMetadata, maxCost, window, openai }, or
// { problem: errorBox } when it cannot be sent as it is.
async function readForm(form) {
  const file = form.elements.file.files[0];
  if (!file) return { problem: errorBox({ code: "no_file", message: "choose a JSON Lines file first" }) };
  const { lines, problems } = readLines(await file.text());
  if (problems.length || !lines.length) {
    const list = problems.length ? problems : [{ line: "-", message: "the file holds no request" }];
    return { problem: errorBox({ code: "invalid_jsonl", message: `${file.name} is not JSON Lines` }, problemList(
      list.map((p) => `line ${p.line}: ${p.message}`))) };
  }
  const rawMetadata = form.elements.metadata.value.trim();
  let metadata;
  if (rawMetadata) {
    try {
      metadata = JSON.parse(rawMetadata);
    } catch (err) {
      return { problem: errorBox({ code: "invalid_metadata", message: `metadata is not JSON: ${err.message}` }) };
    }
  }
  const cap = form.elements.max_cost.value.trim();
  const maxCost = cap === "" ? null : Number(cap);
  if (maxCost !== null && !(Number.isFinite(maxCost) && maxCost > 0)) {
    return { problem: errorBox({ code: "invalid_max_cost", message: "the spend cap is an amount of dollars above 0" }) };
  }
  const window = form.elements.completion_window.value.trim() || null;
  const openai = isOpenAIFile(lines);
  if (openai && maxCost !== null) {
    return { problem: errorBox({ code: "max_cost_not_supported", message: "a spend cap is for Relay's format: an "
      + "OpenAI batch input file goes through the OpenAI-compatible API, which has none (empty the spend cap, or "
      + "submit the bodies in Relay's format)" }) };
  }
  if (openai && window !== null) {
    return { problem: errorBox({ code: "completion_window_not_supported", message: "a deadline is for Relay's "
      + "format: an OpenAI batch input file goes through the OpenAI-compatible API, whose window is 24h (empty the "
      + "deadline, or submit the bodies in Relay's format)" }) };
  }
  return { file, lines, metadata, rawMetadata, maxCost, window, openai };
}

// The estimate of what the form would submit (`POST /v1/batches/estimate`), shown above the submit button; a newer
// change of the form makes an older answer moot.
let asked = 0;
async function estimateForm(form, region) {
  const mine = ++asked;
  region.hidden = false;
  replace(region, h("h2", { id: "estimate-h" }, "Estimate"), h("p", { role: "status" }, "Estimating…"));
  const read = await readForm(form);
  if (mine !== asked) return;
  if (read.problem) {
    replace(region, h("h2", { id: "estimate-h" }, "Estimate"), read.problem);
    return;
  }
  const body = read.openai ? openaiAsRelay(read.lines) : relayBody(read.lines, form.elements.shape.value, read);
  if (!body) {
    replace(region, h("h2", { id: "estimate-h" }, "Estimate"), h("p", {}, "No estimate: the file's lines name more "
      + "than one endpoint (see the error when you submit)."));
    return;
  }
  let estimate;
  try {
    estimate = await call("/v1/batches/estimate", { method: "POST", body });
  } catch (err) {
    if (mine === asked) {
      replace(region, h("h2", { id: "estimate-h" }, "Estimate"),
        errorBox(err, itemProblems(err, read.lines)));
    }
    return;
  }
  if (mine === asked) showEstimate(region, estimate);
}

async function send(form, result) {
  replace(result, h("p", { role: "status" }, "Reading the file…"));
  const read = await readForm(form);
  if (read.problem) {
    replace(result, read.problem);
    return;
  }
  if (read.openai) await sendOpenAI(read.file, read.lines, read.metadata, result);
  else await sendRelay(read.lines, relayBody(read.lines, form.elements.shape.value, read), result);
}

// Relay's submit body: the lines spliced into it as they are, after the form's options.
function relayBody(lines, shape, { rawMetadata, maxCost, window }) {
  return `{"shape": ${JSON.stringify(shape)}, ${rawMetadata ? `"metadata": ${rawMetadata}, ` : ""}`
    + `${maxCost !== null ? `"max_cost": ${JSON.stringify(maxCost)}, ` : ""}`
    + `${window !== null ? `"completion_window": ${JSON.stringify(window)}, ` : ""}"requests": [`
    + `${lines.map((l) => l.text).join(",")}]}`;
}

// An OpenAI batch input file as the Relay submit it amounts to (for its estimate), or null when its lines name
// no single endpoint.
function openaiAsRelay(lines) {
  const endpoints = [...new Set(lines.map(({ value }) => value.url))];
  const shape = endpoints.length === 1 ? SHAPE_OF_ENDPOINT[endpoints[0]] : null;
  if (!shape) return null;
  return JSON.stringify({ shape, requests: lines.map(({ value }) => value.body) });
}

async function sendRelay(lines, body, result) {
  replace(result, h("p", { role: "status" }, `Submitting ${lines.length} requests…`));
  try {
    const batch = await call("/v1/batches", { method: "POST", body });
    window.location.hash = `#/batches/${batch.id}`;
  } catch (err) {
    replace(result, errorBox(err, itemProblems(err, lines)));
  }
}

// Every line an object of OpenAI's batch input members (the first line decides what the others must be).
function isOpenAIFile(lines) {
  return lines.every(({ value }) => value && typeof value === "object" && !Array.isArray(value)
    && "custom_id" in value && "body" in value && Object.keys(value).every((k) => OPENAI_LINE.includes(k)));
}

// An OpenAI batch input file: uploaded (`POST /v1/files`), then a batch created from it (`POST /v1/batches`) for
// the endpoint its lines name.
async function sendOpenAI(file, lines, metadata, result) {
  const endpoints = [...new Set(lines.map(({ value }) => value.url))];
  const endpoint = endpoints.length === 1 && OPENAI_ENDPOINTS.includes(endpoints[0]) ? endpoints[0] : null;
  if (!endpoint) {
    replace(result, errorBox({ code: "invalid_batch", message: "an OpenAI batch input file names one endpoint in every"
      + ` line's url: ${OPENAI_ENDPOINTS.join(" or ")} (this one names ${endpoints.join(", ")})` }));
    return;
  }
  replace(result, h("p", { role: "status" }, `OpenAI batch input file: uploading ${lines.length} requests for ${endpoint}…`));
  try {
    const form = new FormData();
    form.append("purpose", "batch");
    form.append("file", file, file.name);
    const uploaded = await call("/v1/files", { method: "POST", body: form });
    const batch = await call("/v1/batches", { method: "POST", body: JSON.stringify({
      input_file_id: uploaded.id, endpoint, completion_window: "24h", ...(metadata ? { metadata } : {}) }) });
    window.location.hash = `#/batches/${uuidOf(batch.id)}`;
  } catch (err) {
    replace(result, errorBox(err, lineProblems(err)));
  }
}

// `batch_<32 hex>` as the UUID Relay's own pages use.
function uuidOf(id) {
  const hex = id.replace(/^batch_/, "");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// Non-blank lines with their line numbers and values, and the lines that are not JSON.
function readLines(text) {
  const lines = [];
  const problems = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    try {
      lines.push({ text: line.trim(), line: i + 1, value: JSON.parse(line) });
    } catch (err) {
      problems.push({ line: i + 1, message: `not valid JSON (${err.message})` });
    }
  });
  return { lines, problems };
}

// The API's whole-batch validation errors, one per item index (with the file's line number).
function itemProblems(err, lines) {
  if (!(err instanceof ApiError) || !Array.isArray(err.details)) return null;
  return counted(err.details.map((d) => {
    if (d.idx === undefined || d.idx === null) return `${d.field}: ${d.message}`;
    const where = lines[d.idx] ? ` (line ${lines[d.idx].line})` : "";
    return `item ${d.idx}${where} · ${d.field}: ${d.message}`;
  }));
}

// An OpenAI input file's errors, by its line and custom_id.
function lineProblems(err) {
  if (!(err instanceof ApiError) || !Array.isArray(err.details)) return null;
  return counted(err.details.map((d) => {
    const where = d.line === null || d.line === undefined ? "the file" : `line ${d.line}`;
    const id = d.custom_id ? ` (custom_id ${d.custom_id})` : "";
    return `${where}${id} · ${d.field || "line"}: ${d.message}`;
  }));
}

function counted(entries) {
  return [h("p", {}, `${entries.length} problem${entries.length === 1 ? "" : "s"}; nothing was submitted:`),
    problemList(entries)];
}

function problemList(entries) {
  return h("ol", { class: "problems" }, entries.map((text) => h("li", {}, text)));
}
