// Two episodes of the same task side by side (different harnesses or models).
import { api, el, episodeFacts, link, params, replace, setStatus, timelineView, watch } from "/static/viewer.js";

const a = params.get("a") || "";
const b = params.get("b") || "";

function column(data, key) {
  const ep = data.episode;
  const name = ep ? `${ep.harness} · ${ep.model} · attempt ${(ep.attempt ?? 0) + 1} · ${ep.status}` : key;
  return el("section", { "aria-label": `episode ${key}` },
    el("h2", {}, link("/episode", { key }, name)),
    episodeFacts(ep, key),
    el("p", { class: "muted" }, `${data.totals.calls} call(s) · ${data.totals.input_tokens} tokens in, ${data.totals.output_tokens} out`),
    timelineView(key, data.calls, { compact: true }));
}

watch(async () => {
  if (!a || !b) {
    setStatus("Choose two episodes: open an episode and use its Compare form.", true);
    return;
  }
  const [left, right] = await Promise.all([api("/api/episode", { key: a }), api("/api/episode", { key: b })]);
  const task = left.episode?.task ?? right.episode?.task ?? "?";
  document.getElementById("title").textContent = `Compare: ${task}`;
  const differ = left.episode && right.episode && left.episode.task !== right.episode.task;
  setStatus(differ ? "These episodes are of different tasks." : `Two episodes of ${task}`, differ);
  replace("content", el("div", { class: "columns" }, column(left, a), column(right, b)));
});
