// Submit: a JSON Lines file of request bodies and a shape. The lines are checked to be JSON here (by line
// number) and spliced into the body as they are; the API validates the whole batch and lists every bad item.
import { ApiError, call } from "./api.js";
import { errorBox, h, replace } from "./ui.js";

const SHAPES = [["openai", "OpenAI Chat Completions"], ["anthropic", "Anthropic Messages"],
  ["openai_responses", "OpenAI Responses"]];

export function submitView(main, route, session) {
  if (session.role === "admin") {
    replace(main, h("h1", { tabindex: "-1" }, "Submit a batch"),
      h("p", {}, "The admin token cannot submit batches: sign in with a relay key or an inference token."));
    return () => {};
  }
  const result = h("div", { id: "submit-result", "aria-live": "polite" });
  const form = h("form", { class: "form", id: "submit-form", novalidate: true },
    h("div", { class: "field" }, h("label", { for: "file" }, "Requests file (JSON Lines: one request body per line)"),
      h("input", { type: "file", id: "file", name: "file", required: true,
        accept: ".jsonl,.ndjson,.json,.txt,application/x-ndjson,application/jsonl,text/plain" })),
    h("div", { class: "field" }, h("label", { for: "shape" }, "Shape of every request"),
      h("select", { id: "shape", name: "shape" }, SHAPES.map(([v, label]) => h("option", { value: v }, `${v} — ${label}`)))),
    h("div", { class: "field" }, h("label", { for: "metadata" }, "Metadata (optional JSON object)"),
      h("textarea", { id: "metadata", name: "metadata", rows: "2", placeholder: '{"job": "nightly"}' })),
    h("button", { type: "submit", class: "button primary" }, "Submit batch"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(form, result);
  });
  replace(main, h("h1", { tabindex: "-1" }, "Submit a batch"),
    h("p", {}, "Each non-blank line of the file is one request body of the chosen shape, without ", h("code", {}, "stream"),
      ". Relay checks the whole batch first: one bad item rejects it, and every problem is listed below."),
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
  let metadata = "";
  const raw = form.elements.metadata.value.trim();
  if (raw) {
    try {
      JSON.parse(raw);
      metadata = `"metadata": ${raw}, `;
    } catch (err) {
      replace(result, errorBox({ code: "invalid_metadata", message: `metadata is not JSON: ${err.message}` }));
      return;
    }
  }
  const body = `{"shape": ${JSON.stringify(form.elements.shape.value)}, ${metadata}"requests": [`
    + `${lines.map((l) => l.text).join(",")}]}`;
  replace(result, h("p", { role: "status" }, `Submitting ${lines.length} requests…`));
  try {
    const batch = await call("/v1/batches", { method: "POST", body });
    window.location.hash = `#/batches/${batch.id}`;
  } catch (err) {
    replace(result, errorBox(err, itemProblems(err, lines)));
  }
}

// Non-blank lines with their line numbers, and the lines that are not JSON.
function readLines(text) {
  const lines = [];
  const problems = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    try {
      JSON.parse(line);
      lines.push({ text: line.trim(), line: i + 1 });
    } catch (err) {
      problems.push({ line: i + 1, message: `not valid JSON (${err.message})` });
    }
  });
  return { lines, problems };
}

// The API's whole-batch validation errors, one per item index (with the file's line number).
function itemProblems(err, lines) {
  if (!(err instanceof ApiError) || !Array.isArray(err.details)) return null;
  const entries = err.details.map((d) => {
    if (d.idx === undefined || d.idx === null) return `${d.field}: ${d.message}`;
    const where = lines[d.idx] ? ` (line ${lines[d.idx].line})` : "";
    return `item ${d.idx}${where} · ${d.field}: ${d.message}`;
  });
  return [h("p", {}, `${entries.length} problem${entries.length === 1 ? "" : "s"}; nothing was submitted:`),
    problemList(entries)];
}

function problemList(entries) {
  return h("ol", { class: "problems" }, entries.map((text) => h("li", {}, text)));
}
