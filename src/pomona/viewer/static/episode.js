// One episode: its facts, the timeline of its model calls, then its artifacts. `j` / `k` move
// between calls. An episode still running refreshes as its calls are recorded.
import { api, artifactView, el, episodeFacts, link, params, replace, setStatus, timelineView, watch } from "/static/viewer.js";

const key = params.get("key") || "";
document.getElementById("title").textContent = `Episode ${key}`;
document.title = `Episode ${key} · pomona view`;

function compareForm(others) {
  if (!others.length) return el("p", { class: "muted" }, "No other episode of this task to compare with.");
  const choice = el("select", { id: "compare-with", name: "b" }, others.map((o) =>
    el("option", { value: o.episode }, `${o.harness} · ${o.model} · ${o.status} · ${o.run} (${o.episode})`)));
  return el("form", { class: "filters", action: "/compare", method: "get" },
    el("input", { type: "hidden", name: "a", value: key }),
    el("label", { for: "compare-with" }, "Compare with another episode of this task", choice),
    el("button", { type: "submit" }, "Compare"));
}

watch(async () => {
  const data = await api("/api/episode", { key });
  const t = data.totals;
  setStatus(`${t.calls} call(s) · ${t.input_tokens} tokens in, ${t.output_tokens} out · ${t.errors} failed call(s)${data.in_flight ? " · still running" : ""}`);
  replace("content",
    episodeFacts(data.episode, key, data.opened_as),
    el("p", {}, link("/api/episode/raw", { key }, "Raw rows (JSON)")),
    data.episode ? compareForm(data.same_task) : null,
    el("h2", {}, "Model calls"),
    el("p", { class: "muted" }, "Highlighted messages are new since the previous call; earlier ones fold away. Keys: j next call, k previous."),
    timelineView(key, data.calls),
    el("h2", {}, "Artifacts"),
    data.artifacts.length ? verdictsFirst(data.artifacts).map((a) => artifactView(key, a)) : el("p", { class: "muted" }, "No artifacts recorded."));
});

document.addEventListener("keydown", (e) => {
  if (e.target.closest("input, select, textarea") || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key !== "j" && e.key !== "k") return;
  const heads = [...document.querySelectorAll("ol.timeline h3")];
  if (!heads.length) return;
  const at = heads.findIndex((h) => h === document.activeElement);
  const next = e.key === "j" ? Math.min(heads.length - 1, at + 1) : Math.max(0, at - 1);
  heads[next].focus();
  heads[next].scrollIntoView({ block: "start" });
});

// The verdict of the episode's verification before the files it rests on.
function verdictsFirst(artifacts) {
  return [...artifacts].sort((a, b) => (b.kind === "verdict") - (a.kind === "verdict"));
}
