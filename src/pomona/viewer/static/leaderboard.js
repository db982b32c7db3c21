// The leaderboard: benchmark × harness × model with pass@k and pass^k, sortable, and the same
// heatmap as `pomona leaderboard --html`.
import { api, el, num, pct, replace, setStatus, sortableTable, watch } from "/static/viewer.js";

watch(async (overview) => {
  const data = await api("/api/leaderboard");
  if (!data.rows.length) {
    setStatus("No episodes recorded yet.");
    replace("content");
    return;
  }
  setStatus(`${data.rows.length} benchmark · harness · model combination(s)`);
  const columns = [
    { key: "benchmark", label: "benchmark" },
    { key: "harness", label: "harness" },
    { key: "model", label: "model" },
    { key: "tasks", label: "tasks", num: true },
    { key: "trials", label: "trials", num: true },
    { key: "resolve_rate", label: "resolve rate", num: true, cell: (r) => pct(r.resolve_rate) },
    { key: "mean_reward", label: "mean reward", num: true, cell: (r) => num(r.mean_reward, 3) },
    ...data.ks.filter((k) => k > 1).map((k) => ({ key: `pass@${k}`, label: `pass@${k}`, num: true, value: (r) => r.pass_at[k], cell: (r) => pct(r.pass_at[k]) })),
    ...data.ks.filter((k) => k > 1).map((k) => ({ key: `pass^${k}`, label: `pass^${k}`, num: true, value: (r) => r.pass_hat[k], cell: (r) => pct(r.pass_hat[k]) })),
    { key: "infra_failures", label: "infra failures", num: true, cell: (r) => (r.infra_failures ? `${r.infra_failures} (${Object.entries(r.failures).map(([k, n]) => `${k} ${n}`).join(", ")})` : "0") },
  ];
  replace("content",
    el("p", { class: "muted" }, "Rates are means over tasks; episodes with an infrastructure failure are left out and counted apart."),
    sortableTable(columns, data.rows, "Ranked by benchmark, then resolve rate; click a heading to sort"),
    el("h2", {}, "The same model under different harnesses"),
    el("img", { class: "plot", src: `/api/leaderboard.png?v=${overview.version}`, alt: "Heatmap per benchmark: resolve rate in percent for each model (rows) under each harness (columns)" }));
});
