"""The `episodes` row and what hangs off it: the one writer (the proxy writes the row once, at
the episode's first close) and the artifacts saved beside the trajectories."""

from __future__ import annotations

from pathlib import Path

from pomona.episodes.record import EpisodeRecord
from pomona.proxy.control import ProxyControl


def save_artifacts(proxy: ProxyControl, key: str, files: dict[str, bytes]) -> list[dict[str, str]]:
    """Files of an episode beside its trajectories (DIR/artifacts/<episode>/...), as {name, uri}.
    Nothing is kept where the trajectories are not a directory of this machine."""
    if not files or proxy.trajectories is None:
        return []
    root = (proxy.trajectories / "artifacts" / key).resolve()
    out = []
    for name, data in sorted(files.items()):
        path = (root / name).resolve()
        if not path.is_relative_to(root):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        out.append({"name": name, "uri": path.as_uri()})
    return out


def grading_artifacts(log_dir: str | None) -> list[dict[str, str]]:
    """The files a scorer kept in its log directory (SWE-bench: the patch, the test output, the
    report), as artifacts of the episode, so the row says where its grading evidence is."""
    if not log_dir or not Path(log_dir).is_dir():
        return []
    files = sorted(p for p in Path(log_dir).iterdir() if p.is_file())
    return [{"name": f"grading/{p.name}", "uri": p.resolve().as_uri()} for p in files]


def close_episode(proxy: ProxyControl, record: EpisodeRecord) -> None:
    """Write the `episodes` row of `record` (the proxy writes it once, at the first close)."""
    proxy.close_episode(
        record.episode,
        reward=record.reward,
        resolved=record.resolved,
        failure_kind=record.failure_kind,
        failure_message=record.failure_message,
        artifacts=record.artifacts,
    )
