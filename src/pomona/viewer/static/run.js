// One run: its summaries, then tasks × attempts (pass / fail / infra) with filters and pages.
import { api, badge, el, inFlightSection, link, num, pager, params, pct, replace, setStatus, watch, when } from "/static/viewer.js";

const run = params.get("run") || "";
const state = { status: params.get("status") || "", failure_kind: params.get("failure_kind") || "", task: params.get("task") || "", offset: Number(params.get("offset") || 0) };
const LIMIT = 50;
document.getElementById("title").textContent = `Run ${run}`;
document.title = `Run ${run} · pomona view`;

function remember() {
  const q = new URLSearchParams({ run, ...Object.fromEntries(Object.entries(state).filter(([, v]) => v !== "" && v !== 0)) });
  history.replaceState(null, "", `/run?${q}`);
}

function header(detail) {
  const rows = detail.summaries.map((s) => el("tr", {},
    el("td", {}, s.benchmark), el("td", {}, s.harness), el("td", {}, s.model),
    el("td", { class: "num" }, s.tasks), el("td", { class: "num" }, s.trials),
    el("td", { class: "num" }, pct(s.resolve_rate)), el("td", { class: "num" }, num(s.mean_reward, 3)),
    el("td", {}, Object.entries(s.pass_at).filter(([k]) => k > 1).map(([k, v]) => `pass@${k} ${pct(v)}, pass^${k} ${pct(s.pass_hat[k])}`).join("; ") || "–"),
    el("td", { class: "num" }, s.infra_failures)));
  return [
    el("p", {}, detail.live ? el("span", { class: "badge live" }, "running") : "finished",
      ` · ${detail.episodes} episodes on ${detail.tasks} tasks${detail.in_flight ? `, ${detail.in_flight} in flight` : ""} · ${detail.passed} passed, ${detail.failed} failed, ${detail.infra} infra failures${detail.helpers ? ` · ${detail.helpers} judge or simulated-user episodes (not attempts)` : ""} · started ${when(detail.started_at)}, last episode ${when(detail.last_at)}`),
    el("table", {}, el("caption", { class: "muted" }, "Per benchmark, harness and model"),
      el("thead", {}, el("tr", {}, ["benchmark", "harness", "model", "tasks", "trials", "resolve rate", "mean reward", "pass@k / pass^k", "infra failures"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows)),
  ];
}

function inFlight(items) {
  return inFlightSection(items, "Episodes of this run still running; each adds to the results below when it ends.",
    (i) => [link("/episode", { key: i.episode }, i.task ?? i.episode),
      ` · ${i.harness ?? "?"} · ${i.model ?? "?"} · ${i.calls} call(s) · last at ${when(i.last_call_at)}`]);
}

let typed = null; // the task filter as typed, not yet submitted
function filters(detail) {
  const select = (name, label, options) => el("label", {}, label,
    el("select", { name, onchange: (e) => { state[name] = e.target.value; state.offset = 0; load(); } },
      options.map(([value, text]) => el("option", { value, selected: state[name] === value }, text))));
  // what is typed survives a re-render (a load still in flight when typing began, a refresh)
  const search = el("input", { type: "search", name: "task", value: typed ?? state.task, placeholder: "part of a task id",
    oninput: (e) => { typed = e.target.value; } });
  return el("form", { class: "filters", role: "search", "aria-label": "Filter attempts", onsubmit: (e) => {
    e.preventDefault(); state.task = search.value; state.offset = 0; load();
  } },
    select("status", "Outcome", [["", "any"], ["pass", "pass"], ["fail", "fail"], ["infra", "infra failure"], ["unscored", "unscored"], ["judge", "judge"], ["simulated-user", "simulated user"]]),
    select("failure_kind", "Failure kind", [["", "any"], ...detail.failure_kinds.map((k) => [k, k])]),
    el("label", {}, "Task", search),
    el("button", { type: "submit" }, "Filter"));
}

function matrix(page) {
  const most = Math.max(1, ...page.tasks.map((t) => t.attempts.length));
  const failures = [];
  const rows = page.tasks.map((t) => el("tr", {}, el("th", { scope: "row" }, t.task ?? "?"),
    Array.from({ length: most }, (_, i) => {
      const a = t.attempts[i];
      if (!a) return el("td", {}, "");
      if (a.failure_message) failures.push(a);
      return el("td", {}, el("a", { href: `/episode?key=${encodeURIComponent(a.episode)}`, title: a.failure_message || "" },
        badge(a.status, a.status === "infra" ? a.failure_kind : null)), el("span", { class: "muted" }, ` ${a.num_calls ?? "?"} calls`));
    })));
  return [
    el("table", { class: "matrix" },
      el("caption", { class: "muted" }, "Tasks × attempts; each cell opens the episode"),
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "task"), Array.from({ length: most }, (_, i) => el("th", { scope: "col" }, `attempt ${i + 1}`)))),
      el("tbody", {}, rows)),
    pager(page.total, page.offset, page.limit, (offset) => { state.offset = offset; load(); }),
    failures.length ? el("section", { "aria-labelledby": "failures" }, el("h2", { id: "failures" }, "Failure messages on this page"),
      el("ul", {}, failures.map((a) => el("li", {}, link("/episode", { key: a.episode }, `${a.task} attempt ${(a.attempt ?? 0) + 1}`), ` (${a.failure_kind}): `, el("pre", {}, a.failure_message))))) : null,
  ];
}

let detail = null;
let latest = 0; // the newest load: an older one answering late must not draw over it
async function load() {
  remember();
  const mine = ++latest;
  try {
    const page = await api("/api/run/tasks", { run, ...state, limit: LIMIT });
    if (mine !== latest) return;
    setStatus(`${page.total} task(s) match`);
    replace("content", header(detail), inFlight(detail.in_flight_episodes), filters(detail), el("h2", {}, "Tasks and attempts"), matrix(page));
  } catch (e) {
    setStatus(e.message, true);
  }
}

watch(async () => {
  detail = await api("/api/run", { run });
  await load();
});
