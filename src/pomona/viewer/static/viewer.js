// Shared helpers of the viewer's pages. Everything recorded is untrusted: it only ever reaches
// the page as text nodes (el() never sets innerHTML), and the CSP forbids inline scripts.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const params = new URLSearchParams(location.search);

export function link(path, query, text) {
  const q = new URLSearchParams(query).toString();
  return el("a", { href: q ? `${path}?${q}` : path }, text);
}

export async function api(path, query = {}) {
  const q = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== "" && v != null));
  const response = await fetch(q.toString() ? `${path}?${q}` : path);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.detail || `${path}: HTTP ${response.status}`);
  return body;
}

export function setStatus(text, isError = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "muted";
}

export function replace(id, ...nodes) {
  const target = document.getElementById(id);
  target.replaceChildren(...nodes.flat().filter(Boolean));
  return target;
}

// -- formatting --------------------------------------------------------------------------------

export const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`);
export const num = (v, digits = 0) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
export const ms = (v) => (v === null || v === undefined ? "–" : v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`);

export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

export function duration(start, end) {
  if (!start || !end) return "–";
  return ms(new Date(end) - new Date(start));
}

export function badge(status, extra) {
  const text = extra ? `${status}: ${extra}` : status;
  return el("span", { class: `badge ${status}` }, text);
}

// -- tables ------------------------------------------------------------------------------------

// columns: [{key, label, num?, value?(row) -> sortable value, cell?(row) -> node|text}]
export function sortableTable(columns, rows, caption, initial = null) {
  let sortKey = initial ? initial.key : null;
  let ascending = initial ? initial.ascending : true;
  const table = el("table");
  if (caption) table.append(el("caption", { class: "muted" }, caption));
  const head = el("tr");
  const body = el("tbody");
  const valueOf = (c, r) => (c.value ? c.value(r) : r[c.key]);
  function draw() {
    const sorted = [...rows];
    if (sortKey) {
      const c = columns.find((x) => x.key === sortKey);
      sorted.sort((a, b) => {
        const x = valueOf(c, a), y = valueOf(c, b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * (ascending ? 1 : -1);
      });
    }
    head.replaceChildren(...columns.map((c) => {
      const sort = c.key === sortKey ? (ascending ? "ascending" : "descending") : "none";
      const button = el("button", { type: "button", onclick: () => {
        ascending = sortKey === c.key ? !ascending : true;
        sortKey = c.key;
        draw();
        head.querySelector(`[data-key="${c.key}"] button`).focus();
      } }, c.label);
      return el("th", { scope: "col", "aria-sort": sort, class: c.num ? "num" : "", "data-key": c.key }, button);
    }));
    body.replaceChildren(...sorted.map((r) => el("tr", {}, columns.map((c) =>
      el("td", { class: c.num ? "num" : "" }, c.cell ? c.cell(r) : (r[c.key] ?? "–"))))));
  }
  draw();
  table.append(el("thead", {}, head), body);
  return table;
}

export function pager(total, offset, limit, go) {
  const last = Math.max(0, Math.ceil(total / limit) - 1);
  const page = Math.floor(offset / limit);
  return el("nav", { class: "pager", "aria-label": "Pages" },
    el("button", { type: "button", disabled: page <= 0, onclick: () => go(Math.max(0, offset - limit)) }, "← Previous"),
    el("span", {}, total ? `${offset + 1}–${Math.min(total, offset + limit)} of ${total}` : "none"),
    el("button", { type: "button", disabled: page >= last, onclick: () => go(offset + limit) }, "Next →"));
}

// -- the store header and live updates -----------------------------------------------------------

let version = null;

// Calls `refresh` now and again whenever the store's version moves (new rows were written).
export function watch(refresh, everyMs = 2000) {
  async function tick() {
    try {
      const o = await api("/api/overview");
      const live = o.live_writers.length ? ` · ${o.in_flight.length} episode(s) in flight` : "";
      replace("store", `${o.episodes} episodes · ${o.calls} calls${live}`);
      // rows move the version; a run ending or a writer dying changes what is live, not rows
      const state = JSON.stringify([o.version, o.live_runs, o.in_flight.length, o.torn_files]);
      if (state !== version) {
        version = state;
        await refresh(o);
      }
    } catch (e) {
      setStatus(e.message, true);
    }
  }
  tick();
  setInterval(tick, everyMs);
}

// -- calls and messages (the episode and compare pages) ----------------------------------------

function diffView(text) {
  return el("pre", { class: "diff" }, text.split("\n").map((line) => {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
    return el("span", { class: cls }, line + "\n");
  }));
}

export function partView(part) {
  switch (part.type) {
    case "text": return el("pre", {}, part.text);
    case "reasoning": return el("div", {}, el("span", { class: "part-label" }, "reasoning"), el("pre", {}, part.text));
    case "tool_call": return el("div", {}, el("span", { class: "part-label" }, `tool call ${part.name}`, part.id ? ` (${part.id})` : ""), el("pre", {}, part.arguments));
    case "tool_result": return el("div", {}, el("span", { class: `part-label${part.is_error ? " error" : ""}` }, `tool result${part.id ? ` for ${part.id}` : ""}${part.is_error ? " (error)" : ""}`), el("pre", {}, part.text));
    case "image": return el("div", { class: "part-label" }, `[image ${part.source || ""}]`);
    default: return el("div", {}, el("span", { class: "part-label" }, part.kind), el("pre", {}, part.json));
  }
}

function messageView(message, isAnswer = false) {
  const label = isAnswer ? "answer" : message.role;
  const cls = `msg${message.new ? " new" : ""}${isAnswer ? " answer" : ""}`;
  return el("div", { class: cls },
    el("span", { class: "role" }, label), message.new && !isAnswer ? el("span", { class: "badge", style: null }, "new") : null,
    message.parts.length ? message.parts.map(partView) : el("div", { class: "muted" }, "(empty)"));
}

function verdict(call) {
  if (call.token_faithful === null || call.token_faithful === undefined) return `faithfulness: not judged (${call.token_faithful_reason || "no token ids"})`;
  return `faithfulness: ${call.token_faithful ? "faithful" : "NOT faithful"} (${call.token_faithful_reason})`;
}

// The messages a call sent again, fetched when their fold is first opened.
function earlierView(key, call, n) {
  const fold = el("details", {}, el("summary", {}, `${call.earlier} earlier message(s), as sent again`));
  let loaded = false;
  fold.addEventListener("toggle", async () => {
    if (!fold.open || loaded) return;
    loaded = true;
    const holder = el("div", {}, el("p", { class: "muted" }, "Loading…"));
    fold.append(holder);
    try {
      const data = await api("/api/episode/call", { key, n });
      holder.replaceChildren(...data.messages.filter((m) => !m.new).map((m) => messageView(m)));
    } catch (e) {
      holder.replaceChildren(el("p", { class: "error" }, e.message));
    }
  });
  return fold;
}

export function callView(key, call, n, { compact = false } = {}) {
  const usage = call.usage || {};
  const statusClass = call.status === "ok" ? "pass" : "fail";
  const heading = el("h3", { id: `call-${n}`, tabindex: "-1" }, `Call ${n + 1}${call.side ? " (side call)" : ""}`);
  return el("li", { class: call.side ? "side" : "" },
    el("div", { class: "callhead" }, heading,
      el("span", { class: `badge ${statusClass}` }, `${call.status}${call.status_code ? ` ${call.status_code}` : ""}`),
      el("span", { class: "meta" }, `${call.dialect} · ${call.model || "?"} via ${call.upstream || "?"}${call.stream ? " · streamed" : ""}`),
      el("span", { class: "meta" }, `tokens in ${usage.input_tokens ?? "–"} / out ${usage.output_tokens ?? "–"}`),
      el("span", { class: "meta" }, `latency ${ms(call.latency_ms)} · first byte ${ms(call.ttfb_ms)}`)),
    compact ? null : el("div", { class: "meta" }, verdict(call), call.tools.length ? ` · tools offered: ${call.tools.join(", ")}` : ""),
    call.error ? el("pre", { class: "error" }, call.error) : null,
    call.request_unparsed !== null ? el("div", {}, el("span", { class: "part-label" }, "request (not JSON)"), el("pre", {}, call.request_unparsed)) : null,
    !compact && call.earlier ? earlierView(key, call, n) : null,
    call.messages.map((m) => messageView(m)),
    call.answer.map((m) => messageView(m, true)),
    call.response_unparsed ? el("div", {}, el("span", { class: "part-label" }, "response (not JSON)"), el("pre", {}, call.response_unparsed)) : null);
}

export function timelineView(key, calls, options = {}) {
  if (!calls.length) return el("p", { class: "muted" }, "No model calls recorded.");
  return el("ol", { class: "timeline", "aria-label": "Model calls in order" }, calls.map((c, i) => callView(key, c, i, options)));
}

// A verifier's verification.json: the verdict first, then what it rests on. Everything in it
// came from a run that may have been hostile, so it is shown as text only.
export function verificationView(text) {
  let v;
  try { v = JSON.parse(text); } catch { return el("pre", {}, text); }
  if (!v || typeof v !== "object") return el("pre", {}, text);
  const fact = (k, value) => [el("dt", {}, k), el("dd", {}, value ?? "–")];
  const integrity = v.integrity || null;
  const good = v.verdict === "resolved";
  const bad = ["spoof", "suspect", "error"].includes(v.verdict);
  return el("div", { class: "verification" },
    el("p", {}, el("span", { class: `badge ${good ? "pass" : bad ? "fail" : ""}` }, String(v.verdict)), " ", String(v.reason ?? "")),
    el("dl", { class: "facts" },
      fact("verified", v.mode === "shared" ? "in the agent's own sandbox (the task asks for shared)" : "in a fresh sandbox of the pristine image"),
      fact("command", v.command ? el("code", {}, String(v.command)) : null),
      fact("image", v.image ? `${v.image}${v.image_digest ? ` (${v.image_digest})` : " (digest unknown)"}` : null),
      fact("sandbox", v.sandbox ? Object.entries(v.sandbox).map(([k, x]) => `${k} ${x ?? "–"}`).join(" · ") : null),
      fact("integrity", integrity === null ? "not checked" : integrity.shown
        ? `shown: ${(integrity.runners || []).join(", ")} reported ${integrity.tests_witnessed} tests`
        : "not shown"),
      fact("failure", v.failure ? `${v.failure.kind}: ${v.failure.reason}` : null)),
    integrity && integrity.problems && integrity.problems.length
      ? el("div", {}, el("span", { class: "part-label" }, "why the run's own account is not trusted"),
        el("ul", {}, integrity.problems.map((p) => el("li", {}, String(p))))) : null,
    v.spoof && v.spoof.length
      ? el("div", {}, el("span", { class: "part-label" }, "what reaches into the testing"),
        el("ul", {}, v.spoof.map((f) => el("li", {}, el("code", {}, String(f.path)), ` — ${f.why}`)))) : null,
    v.environment && Object.keys(v.environment).length
      ? el("details", {}, el("summary", {}, "environment of the test command"),
        el("pre", {}, Object.entries(v.environment).map(([k, x]) => `${k}=${x}`).join("\n"))) : null,
    el("details", {}, el("summary", {}, "verification.json"), el("pre", {}, text)));
}

export function artifactView(key, artifact) {
  const url = `/api/episode/artifact?${new URLSearchParams({ key, index: artifact.index })}`;
  const box = el("section", { "aria-label": `artifact ${artifact.name}` },
    el("h3", {}, `${artifact.name} `, el("span", { class: "muted" }, `(${artifact.kind}${artifact.size !== null ? `, ${artifact.size} bytes` : ""})`)));
  if (artifact.problem) {
    box.append(el("p", { class: "error" }, artifact.problem));
    return box;
  }
  box.append(el("a", { href: url, download: artifact.name.split("/").pop() }, "download"));
  if (artifact.kind === "image") {
    box.append(el("div", {}, el("img", { class: "shot", src: url, alt: `screenshot ${artifact.name}` })));
  } else {
    const holder = el("div", {}, el("p", { class: "muted" }, "Loading…"));
    box.append(holder);
    api("/api/episode/artifact", { key, index: artifact.index, preview: "true" }).then((p) => {
      const shown = artifact.kind === "patch" ? diffView(p.text)
        : artifact.kind === "verdict" && !p.truncated ? verificationView(p.text) : el("pre", {}, p.text);
      holder.replaceChildren(shown,
        p.truncated ? el("p", { class: "muted" }, "Preview cut; download for the whole file.") : "");
    }).catch((e) => holder.replaceChildren(el("p", { class: "error" }, e.message)));
  }
  return box;
}

// Episodes in flight as a list section; `parts(i)` is what one item shows.
export function inFlightSection(items, intro, parts) {
  if (!items.length) return null;
  return el("section", { "aria-labelledby": "flight" },
    el("h2", { id: "flight" }, `In flight (${items.length})`),
    el("p", { class: "muted" }, intro),
    el("ul", {}, items.slice(0, 50).map((i) => el("li", {}, parts(i)))));
}

export function runLink(run) {
  return link("/run", { run: run ?? "(no run)" }, run ?? "(no run)");
}

export function episodeFacts(ep, key, openedAs = null) {
  const fact = (k, v) => [el("dt", {}, k), el("dd", {}, v ?? "–")];
  const running = el("p", { class: "muted" }, `Episode ${key} is still running: its row is written when it ends.`);
  if (!ep && !openedAs) return running;
  if (!ep) return [running, el("dl", { class: "facts" },
    fact("run", runLink(openedAs.run)), fact("benchmark", openedAs.benchmark), fact("task", openedAs.task),
    fact("harness", openedAs.harness), fact("model", openedAs.model))];
  return el("dl", { class: "facts" },
    fact("run", runLink(ep.run)),
    fact("benchmark", ep.benchmark), fact("task", ep.task),
    fact("harness", `${ep.harness ?? "?"} ${ep.harness_version ?? ""}`), fact("model", ep.model),
    fact("runtime", ep.runtime), fact("attempt", ep.attempt),
    fact("outcome", badge(ep.status, ep.status === "infra" ? ep.failure_kind : null)),
    fact("reward", ep.reward), ep.failure_message ? fact("failure", el("pre", {}, ep.failure_message)) : [],
    fact("started", when(ep.started_at)), fact("duration", duration(ep.started_at, ep.ended_at)),
    fact("calls", ep.num_calls));
}
