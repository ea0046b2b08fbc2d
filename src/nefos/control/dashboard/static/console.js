// The console's pages follow the cloud's event stream (/events, relayed from the Compute API's
// /v2.1/nefos-events): a server's row, a server's page or the hosts' table is fetched again when
// an event concerns it. EventSource reconnects by itself and sends Last-Event-ID, so nothing is lost.
"use strict";

function placeBars(root) {
  // The timeline's bars: where each step started and how long it took, in percent of the action.
  for (const bar of root.querySelectorAll(".bar[data-left]")) {
    bar.style.marginLeft = bar.dataset.left + "%";
    bar.style.width = bar.dataset.width + "%";
  }
}

const pending = new Map();

function later(key, fn) {
  // Several events in a burst (a boot has about twenty) fetch once.
  if (pending.has(key)) return;
  pending.set(key, setTimeout(() => { pending.delete(key); fn(); }, 150));
}

async function fragment(url) {
  const response = await fetch(url, { headers: { "X-Console-Fragment": "1" }, credentials: "same-origin" });
  if (response.status === 401) { window.location.assign("/login"); return null; }
  return response;
}

async function refreshRow(id) {
  const response = await fragment("/servers/" + encodeURIComponent(id) + "/row");
  if (!response) return;
  const existing = document.getElementById("server-" + id);
  if (response.status === 404) { if (existing) existing.remove(); return; }
  if (response.status !== 200) return;
  const holder = document.createElement("tbody");
  holder.innerHTML = (await response.text()).trim();
  const row = holder.firstElementChild;
  if (!row) return;
  if (existing) existing.replaceWith(row);
  else document.querySelector("#servers tbody").prepend(row);
}

async function refreshInto(url, target) {
  const response = await fragment(url);
  if (!response || response.status !== 200) return;
  target.innerHTML = await response.text();
  placeBars(target);
}

const RETRY_FIRST_MS = 5000;
const RETRY_MOST_MS = 300000;

function follow(main) {
  let url = "/events?of=" + encodeURIComponent(main.dataset.live);
  if (main.dataset.live === "server") url += "&server=" + encodeURIComponent(main.dataset.server);
  let delay = 0;
  const connect = () => {
    const source = new EventSource(url);
    listen(main, source);
    source.addEventListener("stream.connected", () => { main.dataset.connected = "true"; delay = 0; });
    source.addEventListener("error", () => {
      // A stream that ended is reopened by the browser itself; a refusal (429: too many live pages
      // open, 401, 502) closes it for good: try again later, less often each time.
      if (source.readyState !== EventSource.CLOSED) return;
      main.dataset.connected = "false";
      delay = Math.min(delay ? delay * 2 : RETRY_FIRST_MS, RETRY_MOST_MS);
      setTimeout(connect, delay * (0.5 + Math.random() / 2));
    });
  };
  connect();
}

function listen(main, source) {
  const live = main.dataset.live;
  const onServer = (event) => {
    const data = JSON.parse(event.data);
    if (live === "servers") later(data.server_id, () => refreshRow(data.server_id));
    else if (live === "server") {
      later("summary", () => refreshInto(window.location.pathname + "/summary" + window.location.search,
                                         document.getElementById("summary")));
    }
  };
  for (const kind of ["server.created", "server.updated", "server.deleted", "server.step.started",
                      "server.step.finished", "server.event.received"]) {
    source.addEventListener(kind, onServer);
  }
  const onHost = () => later("hosts", () => refreshInto("/hosts/table", document.getElementById("hosts")));
  for (const kind of ["host.up", "host.down", "host.disabled", "host.enabled"]) {
    source.addEventListener(kind, onHost);
  }
}

async function submitInPlace(event) {
  // A form marked data-async is posted without leaving the page: what it changes arrives as events.
  event.preventDefault();
  const form = event.currentTarget;
  const button = form.querySelector("button[type=submit]");
  if (button) button.disabled = true;
  try {
    // getAttribute: a field named "action" shadows the form's action property.
    const response = await fetch(form.getAttribute("action"), {
      method: "POST", credentials: "same-origin", body: new URLSearchParams(new FormData(form)),
    });
    const landed = new URL(response.url);
    // The message is the landed page's own (the console's words, never its address's).
    const shown = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("flash");
    const error = shown ? shown.textContent.trim() : "";
    const flash = document.getElementById("flash");
    if (flash) flash.textContent = error || (response.ok ? "" : "That did not work (" + response.status + ").");
    if (!error && response.ok && landed.pathname !== window.location.pathname) {
      window.location.assign(landed.pathname);
    } else if (!error && form.dataset.reset !== undefined) {
      form.reset();
    }
  } finally {
    if (button) button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  placeBars(document);
  for (const form of document.querySelectorAll("form[data-async]")) form.addEventListener("submit", submitInPlace);
  const main = document.getElementById("main");
  if (main && main.dataset.live) follow(main);
});
