// Re-run what failed (the submitter only): a new batch of a finished batch's discarded items, or of its discarded
// and cancelled items with the error codes chosen (`POST /v1/batches/{id}/rerun`), with their original requests
// under the caller's current policy. The new batch's page opens; it links back to the batch it re-ran.
import { call } from "./api.js";
import { announce, confirmDialog, errorBox, h, replace } from "./ui.js";

const PAGE = 1000; // items read to count the error codes (a larger batch's counts say "at least")

export function rerunButton(batch, status) {
  return h("button", {
    type: "button", class: "button", id: "rerun-batch",
    onclick: async () => {
      let codes;
      try {
        codes = await errorCodes(batch.id);
      } catch (err) {
        replace(status, errorBox(err));
        return;
      }
      const choice = choices(codes);
      const yes = await confirmDialog({
        title: "Re-run what failed?",
        body: [h("p", {}, `Batch ${batch.id}: a new batch of its failed items, with their original requests, under `
          + "your current policy. This batch stays as it is."), choice.node],
        yes: "Re-run", no: "Not now", tone: "primary",
      });
      if (!yes) return;
      const picked = choice.picked();
      if (picked !== null && !picked.length) {
        replace(status, errorBox({ code: "no_codes", message: "choose at least one error code to re-run" }));
        return;
      }
      try {
        const made = await call(`/v1/batches/${batch.id}/rerun`, {
          method: "POST", query: { format: "relay" }, body: JSON.stringify(picked === null ? {} : { codes: picked }),
        });
        announce(`Re-running ${made.total} items`);
        window.location.hash = `#/batches/${made.id}`;
      } catch (err) {
        replace(status, errorBox(err));
      }
    },
  }, "Re-run failed items…");
}

// The error codes of the batch's discarded and cancelled items: [{ code, state, n, more }], discarded first.
async function errorCodes(id) {
  const found = new Map();
  for (const state of ["discarded", "cancelled"]) {
    const page = await call(`/v1/batches/${id}`, { query: { format: "relay", state, limit: PAGE } });
    for (const item of page.items) {
      const code = item.error_code || "error";
      const entry = found.get(code) || { code, state, n: 0, more: false };
      entry.n += 1;
      entry.more = entry.more || page.items_next_after !== null;
      found.set(code, entry);
    }
  }
  return [...found.values()];
}

// The dialog's choice: every discarded item (the API's default), or the items of the codes ticked.
function choices(codes) {
  const discarded = codes.filter((c) => c.state === "discarded").reduce((n, c) => n + c.n, 0);
  const all = h("input", { type: "radio", name: "rerun-what", id: "rerun-all", value: "all", checked: discarded > 0,
    disabled: discarded === 0 });
  const some = h("input", { type: "radio", name: "rerun-what", id: "rerun-codes", value: "codes",
    checked: discarded === 0 });
  const boxes = codes.map((c) => h("input", { type: "checkbox", id: `rerun-code-${c.code}`, value: c.code,
    dataset: { code: c.code }, onchange: () => { some.checked = true; } }));
  const node = h("fieldset", { class: "choices", id: "rerun-choices" }, h("legend", {}, "Which items"),
    h("label", { for: "rerun-all" }, all, ` Every discarded item (${discarded})`),
    h("label", { for: "rerun-codes" }, some, " Only the failed items with these error codes:"),
    h("div", { class: "codes" }, codes.map((c, i) => h("label", { for: `rerun-code-${c.code}` }, boxes[i],
      " ", h("code", {}, c.code), ` — ${c.more ? "at least " : ""}${c.n} ${c.state}`))));
  return { node, picked: () => (all.checked ? null : boxes.filter((b) => b.checked).map((b) => b.value)) };
}
