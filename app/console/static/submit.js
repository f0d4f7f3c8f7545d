// Submit: a JSON Lines file and a shape. Two formats are told apart by their lines: Relay's (one request body a
// line, spliced into `POST /v1/batches` as they are) and OpenAI's batch input file (`custom_id`, `method`, `url`,
// `body` a line), which goes through the OpenAI-compatible Files and Batches API, so its results keep the
// custom_ids. The lines are checked to be JSON here (by line number); the API validates the whole batch and lists
// every bad item.
import { ApiError, call } from "./api.js";
import { errorBox, h, replace } from "./ui.js";

const SHAPES = [["openai", "OpenAI Chat Completions"], ["anthropic", "Anthropic Messages"],
  ["openai_responses", "OpenAI Responses"]];
const OPENAI_LINE = ["custom_id", "method", "url", "body"];
const OPENAI_ENDPOINTS = ["/v1/chat/completions", "/v1/responses"];

export function submitView(main, route, session) {
  if (session.role === "admin") {
    replace(main, h("h1", { tabindex: "-1" }, "Submit a batch"),
      h("p", {}, "The admin token cannot submit batches: sign in with a relay key or an inference token."));
    return () => {};
  }
  const result = h("div", { id: "submit-result", "aria-live": "polite" });
  const form = h("form", { class: "form", id: "submit-form", novalidate: true },
    h("div", { class: "field" }, h("label", { for: "file" }, "Requests file (JSON Lines)"),
      h("input", { type: "file", id: "file", name: "file", required: true,
        accept: ".jsonl,.ndjson,.json,.txt,application/x-ndjson,application/jsonl,text/plain" })),
    h("div", { class: "field" }, h("label", { for: "shape" }, "Shape of every request (Relay's format)"),
      h("select", { id: "shape", name: "shape" }, SHAPES.map(([v, label]) => h("option", { value: v }, `${v} — ${label}`)))),
    h("div", { class: "field" }, h("label", { for: "metadata" }, "Metadata (optional JSON object; a \"name\" names the "
      + "batch in the lists)"),
    h("textarea", { id: "metadata", name: "metadata", rows: "2", placeholder: '{"name": "nightly evals"}' })),
    h("button", { type: "submit", class: "button primary" }, "Submit batch"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(form, result);
  });
  replace(main, h("h1", { tabindex: "-1" }, "Submit a batch"),
    h("p", { id: "submit-expects" }, "The file is either Relay's format, one request body of the chosen shape a line "
      + "(without ", h("code", {}, "stream"), "), or an OpenAI batch input file, one ", h("code", {},
      "{custom_id, method, url, body}"), " a line, which is sent through the OpenAI-compatible API so results keep "
      + "your custom_ids. Relay checks the whole batch first: one bad item rejects it, and every problem is listed "
      + "below."),
    form, result);
  return () => {};
}

async function send(form, result) {
  const file = form.elements.file.files[0];
  if (!file) {
    replace(result, errorBox({ code: "no_file", message: "choose a JSON Lines file first" }));
    return;
  }
  replace(result, h("p", { role: "status" }, `Reading ${file.name}…`));
  const { lines, problems } = readLines(await file.text());
  if (problems.length || !lines.length) {
    const list = problems.length ? problems : [{ line: "-", message: "the file holds no request" }];
    replace(result, errorBox({ code: "invalid_jsonl", message: `${file.name} is not JSON Lines` }, problemList(
      list.map((p) => `line ${p.line}: ${p.message}`))));
    return;
  }
  const raw = form.elements.metadata.value.trim();
  let metadata;
  if (raw) {
    try {
      metadata = JSON.parse(raw);
    } catch (err) {
      replace(result, errorBox({ code: "invalid_metadata", message: `metadata is not JSON: ${err.message}` }));
      return;
    }
  }
  if (isOpenAIFile(lines)) await sendOpenAI(file, lines, metadata, result);
  else await sendRelay(lines, form.elements.shape.value, raw, result);
}

// Relay's own submit: the lines spliced into the body as they are.
async function sendRelay(lines, shape, rawMetadata, result) {
  const body = `{"shape": ${JSON.stringify(shape)}, ${rawMetadata ? `"metadata": ${rawMetadata}, ` : ""}"requests": [`
    + `${lines.map((l) => l.text).join(",")}]}`;
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
