"""`pomona leaderboard`: rank (benchmark, harness, model) from the stored episodes.

The harness is a leaderboard key because harness effects are large (9-27 points between
harnesses for one model, reference §9): the HTML page plots, per benchmark, the matrix of models
by harnesses, so the same model under different harnesses sits side by side.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pomona.benchmarks.metrics import Summary, summarize

DEFAULT_TRAJECTORIES = Path("pomona-runs")


def load_episodes(trajectories: str | Path) -> list[dict[str, Any]]:
    from pomona import trajectories as store

    directory = Path(trajectories)
    if not directory.exists():
        return []
    return store.read(directory, "episodes").to_pylist()


def rank(summaries: Iterable[Summary]) -> list[Summary]:
    """By benchmark, then resolve rate and mean reward, best first."""
    return sorted(
        summaries,
        key=lambda s: (
            s.benchmark,
            -(s.resolve_rate or 0.0),
            -(s.mean_reward or 0.0),
            s.harness,
            s.model,
        ),
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def rows_of(summaries: list[Summary]) -> tuple[list[str], list[list[str]]]:
    ks = sorted({k for s in summaries for k in s.pass_at if k > 1})
    header = [
        "benchmark",
        "harness",
        "model",
        "tasks",
        "trials",
        "resolve %",
        "reward",
        *(f"pass@{k} %" for k in ks),
        *(f"pass^{k} %" for k in ks),
        "infra fail",
    ]
    body = []
    for s in summaries:
        failures = ", ".join(f"{k} {n}" for k, n in sorted(s.failures.items())) or "0"
        body.append(
            [
                s.benchmark,
                s.harness,
                s.model,
                str(s.tasks),
                str(s.trials),
                _pct(s.resolve_rate),
                "-" if s.mean_reward is None else f"{s.mean_reward:.3f}",
                *(_pct(s.pass_at.get(k)) for k in ks),
                *(_pct(s.pass_hat.get(k)) for k in ks),
                failures,
            ]
        )
    return header, body


def format_table(summaries: list[Summary]) -> str:
    header, body = rows_of(summaries)
    if not body:
        return "no episodes recorded yet"
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = "  ".join
    out = [
        line(h.ljust(w) for h, w in zip(header, widths, strict=True)),
        line("-" * w for w in widths),
    ]
    out += [line(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(out)


def matrix_png(summaries: list[Summary]) -> bytes:
    """One heatmap per benchmark: models (rows) by harnesses (columns), resolve rate in %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benchmarks = sorted({s.benchmark for s in summaries})
    fig, axes = plt.subplots(
        1, len(benchmarks), figsize=(max(4.5, 4.5 * len(benchmarks)), 3.6), squeeze=False
    )
    for ax, bench in zip(axes[0], benchmarks, strict=True):
        group = [s for s in summaries if s.benchmark == bench]
        harnesses = sorted({s.harness for s in group})
        models = sorted({s.model for s in group})
        grid = [[float("nan")] * len(harnesses) for _ in models]
        for s in group:
            if s.resolve_rate is not None:
                grid[models.index(s.model)][harnesses.index(s.harness)] = 100 * s.resolve_rate
        image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(harnesses)), harnesses, rotation=30, ha="right")
        ax.set_yticks(range(len(models)), models)
        ax.set_title(bench)
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if value == value:  # not NaN
                    ax.text(
                        j,
                        i,
                        f"{value:.0f}",
                        ha="center",
                        va="center",
                        color="white" if value < 60 else "black",
                    )
        fig.colorbar(image, ax=ax, label="resolve %")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_html(
    summaries: list[Summary], path: str | Path, title: str = "Pomona leaderboard"
) -> Path:
    """A static page: the ranked table and the cross-harness matrix plot, self-contained."""
    header, body = rows_of(summaries)
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body
    )
    plot = (
        f'<img alt="resolve rate by model and harness" src="data:image/png;base64,'
        f'{base64.b64encode(matrix_png(summaries)).decode()}">'
        if summaries
        else ""
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:left}}th{{background:#f3f3f3}}</style>
</head><body><h1>{html.escape(title)}</h1>
<p>Rates are macro means over tasks; episodes with an infrastructure failure are excluded and
counted in the last column.</p>
<table><tr>{cells}</tr>{rows}</table>
<h2>The same model under different harnesses</h2>{plot}
</body></html>
"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def leaderboard(
    trajectories: str | Path = DEFAULT_TRAJECTORIES, ks: Iterable[int] = (1,)
) -> list[Summary]:
    return rank(summarize(load_episodes(trajectories), ks))


def add_leaderboard_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `leaderboard` on a `pomona` subparsers object."""
    p = subparsers.add_parser(
        "leaderboard", help="rank (benchmark, harness, model) from stored episodes"
    )
    p.add_argument("--trajectories", type=Path, default=DEFAULT_TRAJECTORIES)
    p.add_argument("--html", type=Path, help="also write a static HTML page with the plot")
    p.add_argument("-k", type=int, nargs="*", default=[1, 3], help="pass@k / pass^k to report")
    p.set_defaults(func=_run_leaderboard)
    return p


def _run_leaderboard(args: argparse.Namespace) -> int:
    summaries = leaderboard(args.trajectories, args.k)
    print(format_table(summaries))
    if args.html:
        print(f"wrote {write_html(summaries, args.html)}")
    return 0
