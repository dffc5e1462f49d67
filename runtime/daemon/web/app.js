// quiesce web: a browser client of the socket link (docs/renderers.md). Plain script,
// no build step, no dependency; the page's Content-Security-Policy allows nothing else.
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
const token = params.get("token") || sessionStorage.getItem("quiesce.token") || "";
if (params.get("token")) {
  sessionStorage.setItem("quiesce.token", token);
  history.replaceState(null, "", location.pathname); // the token leaves the address bar
}

let ws = null;
let nextId = 1;
const pending = new Map();
let current = null;
let running = false;
let stopping = false;
const calls = new Map(); // callId -> {box, out, args, tool}
let streaming = null; // the element the current step's deltas go to

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function setStatus(text, cls) {
  const status = $("status");
  status.textContent = text;
  status.className = "status" + (cls ? " " + cls : "");
}

function send(message) {
  ws.send(JSON.stringify(message));
}

function rpc(method, p) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    send({ jsonrpc: "2.0", id, method, params: p === undefined ? {} : p });
  });
}

function connect() {
  ws = new WebSocket(`ws://${location.host}/`, ["quiesce.v1", "quiesce.token." + token]);
  ws.onopen = async () => {
    await rpc("initialize", { protocolVersion: "1.0", clientInfo: { name: "quiesce-web", version: "0.1" } });
    setStatus("connected");
    document.body.dataset.state = "connected";
    await refreshList();
    const saved = sessionStorage.getItem("quiesce.session");
    if (saved) await openSession(saved);
  };
  ws.onclose = (event) => {
    setStatus(`disconnected (${event.code})`, "error");
    document.body.dataset.state = "closed";
    for (const { reject } of pending.values()) reject(new Error("closed"));
    pending.clear();
  };
  ws.onmessage = (event) => onMessage(JSON.parse(event.data));
}

function onMessage(msg) {
  if (msg.method === "session.event") {
    if (msg.params.sessionId === current) onEvent(msg.params.event);
  } else if (msg.method === "permission.request") {
    showPermission(msg);
  } else if (msg.method === "permission.withdrawn") {
    const box = document.querySelector(`[data-request="${CSS.escape(msg.params.requestId)}"]`);
    if (box) box.remove();
  } else if ("id" in msg && pending.has(msg.id)) {
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.error) reject(Object.assign(new Error(msg.error.message), { rpc: msg.error }));
    else resolve(msg.result);
  }
}

async function refreshList() {
  const result = await rpc("session.list");
  const list = $("session-list");
  list.replaceChildren();
  for (const info of result.sessions) {
    const item = el("li", info.sessionId === current ? "current" : "");
    item.dataset.session = info.sessionId;
    const flags = [info.turns ? `${info.turns} turns` : "", info.stopping ? "stopping" :
      info.running ? "running" : "", info.error ? "unreadable" : ""].filter(Boolean);
    item.textContent = (info.title || info.sessionId) + (flags.length ? ` (${flags.join(", ")})` : "");
    item.title = `${info.workspace}\ncreated ${new Date(info.createdAt * 1000).toLocaleString()}`;
    item.onclick = () => openSession(info.sessionId);
    list.append(item);
  }
}

function setRunning(value) {
  running = value;
  $("stop").disabled = !running || stopping;
  if (!stopping) $("stop").textContent = "Stop";
}

async function openSession(sessionId) {
  current = sessionId;
  sessionStorage.setItem("quiesce.session", sessionId);
  calls.clear();
  streaming = null;
  $("transcript").replaceChildren();
  $("permissions").replaceChildren();
  $("waiting").hidden = true;
  $("session-title").textContent = sessionId;
  let attached;
  try {
    attached = await rpc("session.attach", { sessionId });
  } catch (error) {
    await rpc("session.load", { sessionId }); // not loaded: loading replays it to us
    attached = await rpc("session.attach", { sessionId, afterSeq: 1 << 30 });
  }
  setRunning(attached.running);
  if (attached.stopping) showStopping();
  document.body.dataset.attached = sessionId;
  refreshList();
}

function onEvent(event) {
  const transcript = $("transcript");
  switch (event.kind) {
    case "turn/start":
      setRunning(true);
      break;
    case "user/message":
      transcript.append(el("div", "msg user", "> " + event.text));
      break;
    case "assistant/delta":
      if (!streaming) {
        streaming = el("div", "msg assistant streaming");
        transcript.append(streaming);
      }
      if (event.type === "text") streaming.textContent += event.text;
      break;
    case "assistant/message": {
      const text = event.blocks.filter((b) => b.type === "text").map((b) => b.text).join("");
      const node = streaming || el("div", "msg assistant");
      node.className = "msg assistant";
      node.textContent = text + (event.interrupted ? " [interrupted]" : "");
      if (!streaming) transcript.append(node);
      streaming = null;
      break;
    }
    case "tool/call": {
      const box = el("div", "tool");
      box.dataset.call = event.callId;
      const head = el("div", "head", event.tool + " ");
      head.append(el("span", "cls", event.class));
      const state = el("span", "state muted", " waiting");
      head.append(state);
      const args = el("pre", "args", JSON.stringify(event.args, null, 2));
      const out = el("pre", "out");
      box.append(head, args, out);
      transcript.append(box);
      calls.set(event.callId, { box, out, state, args: event.args, tool: event.tool });
      break;
    }
    case "tool/started":
      if (calls.has(event.callId)) calls.get(event.callId).state.textContent = " running";
      break;
    case "tool/progress":
      if (calls.has(event.callId)) calls.get(event.callId).out.textContent += event.text;
      break;
    case "tool/abort":
      if (calls.has(event.callId)) calls.get(event.callId).state.textContent = ` stopping (host: ${event.hostState})`;
      break;
    case "tool/result": {
      const call = calls.get(event.callId);
      if (!call) break;
      call.state.textContent = event.code ? " " + event.code : " done";
      call.box.classList.add(event.isError ? "error" : "ok");
      call.box.dataset.code = event.code || "ok";
      const text = event.content.filter((c) => c.type === "text").map((c) => c.text).join("");
      if (text) call.out.textContent = text;
      break;
    }
    case "turn/end":
      streaming = null;
      transcript.append(el("div", "msg muted end", `turn ${event.turnId} ${event.end.kind}`));
      setRunning(false);
      refreshList();
      break;
    case "stop/waiting":
      showWaiting(event.calls);
      break;
  }
}

function showWaiting(waiting) {
  const list = $("waiting-list");
  list.replaceChildren();
  $("waiting").hidden = waiting.length === 0;
  for (const call of waiting) {
    const item = el("li", "", `${call.tool} (${call.class}, ${call.state}) since ${new Date(call.since * 1000).toLocaleTimeString()} `);
    item.dataset.call = call.callId;
    const force = el("button", "force", "Force");
    force.type = "button";
    force.onclick = () => rpc("agent.force", { sessionId: current, callId: call.callId });
    item.append(force);
    list.append(item);
  }
}

function showPermission(msg) {
  const p = msg.params;
  const box = el("div", "permission");
  box.dataset.request = p.requestId;
  const call = calls.get(p.callId);
  box.append(el("div", "", `${p.tool} asks permission (risk ${p.risk})`));
  box.append(el("pre", "full-args", call ? JSON.stringify(call.args, null, 2) : p.argsPreview));
  for (const decision of ["allow-once", "allow-session", "deny", "deny-session"]) {
    const button = el("button", "decision", decision);
    button.type = "button";
    button.dataset.decision = decision;
    button.onclick = () => {
      send({ jsonrpc: "2.0", id: msg.id, result: { decision } });
      box.remove();
    };
    box.append(button);
  }
  $("permissions").append(box);
}

function showStopping() {
  stopping = true;
  $("stop").disabled = true;
  $("stop").textContent = "Stopping…";
  setStatus("stopping…", "stopping");
}

async function stop() {
  if (!current || stopping) return;
  showStopping();
  let answer;
  try {
    answer = await rpc("agent.abort", { sessionId: current });
  } finally {
    stopping = false;
    setRunning(false);
  }
  setStatus("stopped");
  const timeline = el("div", "timeline");
  timeline.append(el("div", "", `Stop: ${answer.outcome}` + (answer.turnId ? ` turn ${answer.turnId}` : "") +
    ` settled in ${answer.settledMs} ms` + (answer.cause ? ` (${answer.cause.kind})` : "")));
  for (const call of answer.toolCalls) {
    timeline.append(el("div", "", `${call.tool} ${call.callId} [${call.class}]: ${call.code || "finished"}`));
  }
  $("transcript").append(timeline);
  $("waiting").hidden = true;
}

$("stop").onclick = stop;
$("force-all").onclick = () => rpc("agent.force", { sessionId: current });
$("prompt-form").onsubmit = (event) => {
  event.preventDefault();
  const text = $("prompt").value;
  if (!current || !text.trim()) return;
  $("prompt").value = "";
  setRunning(true);
  rpc("agent.prompt", { sessionId: current, text }).catch((error) => {
    $("transcript").append(el("div", "msg error", error.message));
  });
};
$("new-session").onsubmit = async (event) => {
  event.preventDefault();
  try {
    const result = await rpc("session.new", { workspace: $("workspace").value, permissionMode: $("mode").value });
    await openSession(result.sessionId);
  } catch (error) {
    setStatus(error.message, "error");
  }
};
if (token) connect();
else setStatus("no token: open the URL quiesce serve printed", "error");
