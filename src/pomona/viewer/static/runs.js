// The runs page: every run with what ran, its counts and resolve rate; live runs update in place.
import { api, badge, el, inFlightSection, link, num, pct, replace, runLink, setStatus, sortableTable, watch, when } from "/static/viewer.js";

const columns = [
  { key: "run", label: "run", cell: (r) => link("/run", { run: r.run }, r.run) },
  { key: "live", label: "state", value: (r) => (r.live ? 0 : 1), cell: (r) => (r.live ? el("span", { class: "badge live" }, "running") : "finished") },
  { key: "benchmark", label: "benchmark" },
  { key: "harness", label: "harness" },
  { key: "model", label: "model" },
  { key: "episodes", label: "episodes", num: true },
  { key: "in_flight", label: "in flight", num: true },
  { key: "passed", label: "passed", num: true },
  { key: "failed", label: "failed", num: true },
  { key: "infra", label: "infra failures", num: true, cell: (r) => (r.infra ? `${r.infra} (${Object.entries(r.failures).map(([k, n]) => `${k} ${n}`).join(", ")})` : "0") },
  { key: "resolve_rate", label: "resolve rate", num: true, cell: (r) => pct(r.resolve_rate) },
  { key: "calls", label: "calls", num: true },
  { key: "started_at", label: "started", cell: (r) => when(r.started_at) },
  { key: "last_at", label: "last episode", cell: (r) => when(r.last_at) },
];

function inFlight(items) {
  return inFlightSection(items, "Episodes whose calls are being recorded, under the run they were opened in; each adds to its run's results when it ends.",
    (i) => [link("/episode", { key: i.episode }, i.episode), " · run ", runLink(i.run),
      ` · ${i.task ?? "?"} · ${i.harness ?? "?"} · ${i.model ?? "?"} · ${i.calls} call(s) · last at ${when(i.last_call_at)}`]);
}

function torn(files) {
  if (!files.length) return null;
  return el("p", { class: "error", role: "note" }, `${files.length} file(s) end in a partial record: a writer died mid-write. `,
    "Their whole rows are shown; the torn tail is skipped: ", files.join(", "));
}

watch(async (overview) => {
  const data = await api("/api/runs");
  setStatus(data.runs.length ? `${data.runs.length} run(s)` : "No runs recorded yet in this store.");
  replace("content", torn(overview.torn_files), inFlight(data.in_flight),
    data.runs.length ? sortableTable(columns, data.runs, "Runs, newest first; click a heading to sort") : null);
});
