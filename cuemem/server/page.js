// The memory browser (issue 17): a namespace's sessions as a timeline and a search showing hits with their
// scores, engine, labels and evidence. Every value from the server is put in the page as text (textContent),
// never as HTML: turn text is untrusted. The key lives in this tab only (sessionStorage) or in the URL fragment
// (#key=...&q=...), which is never sent to the server.
"use strict";

const $ = (id) => document.getElementById(id);
let apiKey = "";
const turnNodes = new Map();

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function say(text) { $("status").textContent = text || ""; }

async function api(path) {
  const response = await fetch(path, { headers: { Authorization: "Bearer " + apiKey } });
  const body = await response.json().catch(() => ({ message: response.statusText }));
  if (!response.ok) throw new Error(`${response.status}: ${body.message || body.error || "request failed"}`);
  return body;
}

async function loadAll() {
  const turns = [];
  for (let offset = 0; ; offset += 5000) {
    const page = await api(`/v1/memories?limit=5000&offset=${offset}`);
    turns.push(...page);
    if (page.length < 5000) return turns;
  }
}

function renderTimeline(turns) {
  const box = $("timeline");
  box.replaceChildren();
  turnNodes.clear();
  const sessions = new Map();
  for (const turn of turns) {
    if (!sessions.has(turn.session_id)) sessions.set(turn.session_id, []);
    sessions.get(turn.session_id).push(turn);
  }
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  $("counts").textContent = `${plural(sessions.size, "session")} · ${plural(turns.length, "turn")}`;
  if (!turns.length) box.append(el("p", "dim", "No memories in this namespace yet."));
  for (const [session, items] of sessions) {
    const block = el("div", "session");
    const stamps = items.map((t) => t.timestamp).filter(Boolean);
    const first = stamps[0], last = stamps[stamps.length - 1];
    const span = stamps.length ? ` · ${first}${last !== first ? " → " + last : ""}` : "";
    block.append(el("h3", "", `${session}${span} · ${plural(items.length, "turn")}`));
    for (const turn of items) {
      const row = el("div", "turn");
      row.dataset.turnId = turn.id;
      row.append(el("span", "who", turn.speaker), el("span", "when", turn.timestamp || ""),
                 el("span", "tid", turn.id), document.createTextNode(turn.text));
      turnNodes.set(turn.id, row);
      block.append(row);
    }
    box.append(block);
  }
}

const LABEL_KEYS = ["scope", "segment", "events", "entity_types", "entities", "concepts", "people", "type", "key",
                    "kind", "session_id", "timestamp"];

function labels(detail) {
  const out = [];
  for (const name of LABEL_KEYS) {
    let value = detail[name];
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) { if (!value.length) continue; value = value.slice(0, 6).join(", "); }
    else if (typeof value === "object") continue;
    out.push(el("span", "label", `${name}: ${value}`));
  }
  if (detail.profile && typeof detail.profile === "object") {
    const record = detail.profile;
    out.push(el("span", "label kind", `record: ${record.type || ""} ${record.key || ""}`.trim()));
  }
  if (detail.filter && typeof detail.filter === "object") {
    const events = (detail.filter.events || []).join(", ");
    if (events) out.push(el("span", "label kind", `query events: ${events}`));
  }
  return out;
}

function focusTurn(id) {
  const node = turnNodes.get(id);
  if (!node) { say(`turn ${id} is not in the timeline (deleted since?)`); return; }
  for (const other of document.querySelectorAll(".turn.focus")) other.classList.remove("focus");
  node.classList.add("focus");
  node.scrollIntoView({ block: "center" });
}

function renderHits(result) {
  const list = $("hits");
  list.replaceChildren();
  for (const other of document.querySelectorAll(".turn.cited")) other.classList.remove("cited");
  $("search-meta").textContent =
    `${result.hits.length} hits · engine ${result.engine} · ${(result.seconds * 1000).toFixed(0)} ms · ${result.tokens} tokens`;
  for (const hit of result.hits) {
    const item = el("li", "hit");
    const head = el("div");
    head.append(el("span", "score", Number(hit.score).toFixed(4)), document.createTextNode(" "),
                el("span", "label kind", hit.engine), ...labels(hit.detail || {}));
    const evidence = el("div", "evidence", "evidence: ");
    for (const id of hit.turn_ids) {
      const link = el("button", "", id);
      link.type = "button";
      link.addEventListener("click", () => focusTurn(id));
      evidence.append(link);
      const node = turnNodes.get(id);
      if (node) node.classList.add("cited");
    }
    item.append(head, el("div", "text", hit.text), evidence);
    list.append(item);
  }
}

async function open(key) {
  apiKey = key;
  sessionStorage.setItem("cuemem-key", key);
  say("");
  try {
    const who = await api("/v1/whoami");
    $("who").textContent = `key ${who.id} · user ${who.user_id}${who.agent_id ? " · agent " + who.agent_id : ""}`;
    renderTimeline(await loadAll());
  } catch (err) {
    say(String(err.message || err));
    if (String(err.message).startsWith("404")) renderTimeline([]);
  }
}

async function search(query) {
  const params = new URLSearchParams({ q: query, k: $("k").value || "8" });
  if ($("engine").value.trim()) params.set("engine", $("engine").value.trim());
  say("searching…");
  try {
    renderHits(await api(`/v1/memories/search?${params}`));
    say("");
  } catch (err) {
    say(String(err.message || err));
  }
}

// The answer, streamed (POST /v1/answer/stream, server-sent events): tokens appear as the model decodes them, then
// the turns it cites (links into the timeline), the dates it used and the model that answered.
function showAnswerEvent(block, text, box) {
  let kind = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) kind = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  const body = JSON.parse(data || "{}");
  if (kind === "token") text.textContent += body.text;
  else if (kind === "error") say(`${body.error}: ${body.message}`);
  else if (kind === "answer") {
    text.textContent = body.text;
    const cites = el("div", "evidence", "cites: ");
    for (const id of body.cited_turn_ids) {
      const link = el("button", "", id);
      link.type = "button";
      link.addEventListener("click", () => focusTurn(id));
      cites.append(link);
    }
    const dates = body.dates && body.dates.length ? ` · dates: ${body.dates.join("; ")}` : "";
    box.append(cites, el("div", "dim", `answered by ${body.model}${dates}`));
    say("");
  }
}

async function ask(question) {
  const box = $("answer");
  const text = el("p", "answer-text", "");
  box.replaceChildren(text);
  say("answering…");
  const body = { question, k: Number($("k").value) || 8 };
  if ($("engine").value.trim()) body.engine = $("engine").value.trim();
  try {
    const response = await fetch("/v1/answer/stream", {
      method: "POST",
      headers: { Authorization: "Bearer " + apiKey, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      const error = await response.json().catch(() => ({ message: response.statusText }));
      throw new Error(`${response.status}: ${error.message || error.error || "request failed"}`);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
        showAnswerEvent(buffer.slice(0, cut), text, box);
        buffer = buffer.slice(cut + 2);
      }
    }
  } catch (err) {
    say(String(err.message || err));
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("connect").addEventListener("submit", (event) => { event.preventDefault(); open($("key").value.trim()); });
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    if ($("q").value.trim()) search($("q").value.trim());
  });
  $("ask").addEventListener("click", () => { if ($("q").value.trim()) ask($("q").value.trim()); });
  const fragment = new URLSearchParams(location.hash.slice(1));
  const key = fragment.get("key") || sessionStorage.getItem("cuemem-key");
  if (key) {
    $("key").value = key;
    await open(key);
    const query = fragment.get("q");
    if (query) { $("q").value = query; await search(query); }
    const question = fragment.get("ask");
    if (question) { $("q").value = question; await ask(question); }
  }
});
