// The Relay console: sign-in, navigation and a hash router over the views. No build step, no third-party code.
import { ApiError, session, signIn, signOut } from "./api.js";
import { batchView } from "./batch.js";
import { batchesView } from "./batches.js";
import { operatorView } from "./operator.js";
import { submitView } from "./submit.js";
import { errorBox, h, replace, viewerZone } from "./ui.js";
import { usageView } from "./usage.js";
import { webhooksView } from "./webhooks.js";

const ROUTES = {
  caller: { batches: batchesView, submit: submitView, usage: usageView, operator: operatorView },
  admin: { operator: operatorView, usage: usageView, webhooks: webhooksView },
};
const HOME = { caller: "#/batches", admin: "#/operator" };
const NAV = {
  caller: [["#/batches", "Batches"], ["#/submit", "Submit"], ["#/usage", "Usage"]],
  admin: [["#/operator", "Operator"], ["#/usage", "Usage"], ["#/webhooks", "Webhooks"]],
};

let stopView = () => {};
let firstRender = true;

function parseHash() {
  const [path, query] = window.location.hash.replace(/^#\/?/, "").split("?");
  return { path: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query || "") };
}

function render() {
  stopView();
  stopView = () => {};
  const main = document.getElementById("main");
  const current = session();
  renderHeader(current);
  if (!current) {
    signInView(main);
    return;
  }
  const route = parseHash();
  const [page, id] = route.path;
  if (!page) {
    window.location.replace(HOME[current.role]);
    return;
  }
  const view = page === "batches" && id ? batchView : ROUTES[current.role][page];
  if (!view) {
    replace(main, h("h1", { tabindex: "-1" }, "Not here"), h("p", {}, "This page is not part of the console for your sign-in. ",
      h("a", { href: HOME[current.role] }, "Go to the start page"), "."));
  } else {
    stopView = view(main, route, current) || (() => {});
  }
  markNav(page);
  const heading = main.querySelector("h1");
  if (heading && !firstRender) heading.focus({ preventScroll: true }); // keyboard and screen reader users start here
  firstRender = false;
}

function go(hash) {
  if (window.location.hash === hash) render();
  else window.location.hash = hash;
}

function renderHeader(current) {
  const nav = document.getElementById("nav");
  const who = document.getElementById("who");
  document.getElementById("sign-out").hidden = !current;
  replace(nav, ...(current ? NAV[current.role].map(([href, text]) => h("a", { href, dataset: { page: href.slice(2) } }, text))
    : []));
  replace(who, current ? describe(current) : "");
  replace(document.getElementById("zone"), `Times are shown in your time zone (${viewerZone()}).`);
}

function markNav(page) {
  for (const link of document.querySelectorAll("#nav a")) {
    const here = link.dataset.page === page || (page === "batches" && link.dataset.page === "batches");
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function describe({ role, secret }) {
  if (role === "admin") return "Signed in with the admin token";
  const kind = secret.startsWith("rt_") ? "an inference token" : "a relay key";
  return `Signed in with ${kind} (${secret.slice(0, 7)}…)`;
}

function signInView(main) {
  const out = h("div", { "aria-live": "polite" });
  const form = h("form", { class: "form", id: "sign-in", autocomplete: "off" },
    h("div", { class: "field" }, h("label", { for: "secret" }, "Relay key, inference token or admin token"),
      h("input", { type: "password", id: "secret", name: "secret", required: true, spellcheck: "false",
        autocomplete: "off" })),
    h("button", { type: "submit", class: "button primary" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const secret = form.elements.secret.value.trim();
    if (!secret) return;
    replace(out, h("p", { role: "status" }, "Checking…"));
    try {
      const { role } = await signIn(secret);
      go(HOME[role]);
    } catch (err) {
      replace(out, errorBox(err instanceof ApiError ? err : { message: String(err) }));
    }
  });
  replace(main, h("h1", { tabindex: "-1" }, "Sign in"),
    h("p", {}, "Use a relay key (rk_…) or an inference token (rt_…) to see your batches, or the admin token for the "
      + "operator view. It is kept in this browser tab only (never in a cookie) and forgotten when the tab closes."),
    form, out);
  form.elements.secret.focus();
}

document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  go("#/");
});
window.addEventListener("hashchange", render);
render();
