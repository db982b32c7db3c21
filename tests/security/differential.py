"""The differential probe: what code inside a sandbox may do, asked of the kernel by one program
(probe/probe.c) in `docker run` with the engine's defaults and in every Pomona runtime, as root
and as the default user.

A result maps each check to (verdict, detail); the verdict is "yes" (the sandbox was let do it),
"no" (refused) or "error" (the check itself failed). Pomona is at least as strict as the engine's
defaults where every check Docker refuses is refused too. Namespace facts (`@ns.*` lines) become
checks here: "ns.KIND.host" is "yes" when the sandbox shares that namespace with this process.

`python -m tests.security.differential` runs every column this machine can run and writes the
table into docs/security.md (between the markers there).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pomona import SandboxClient

SOURCE = Path(__file__).with_name("probe") / "probe.c"
DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BEGIN, END = "<!-- differential table: begin -->", "<!-- differential table: end -->"
NAMESPACES = ("pid", "net", "mnt", "uts", "ipc", "user", "cgroup", "time")
USERS = ("root", "user")  # "user": uid 1000, Pomona's default user ("pomona")
Results = dict[str, tuple[str, str]]


def probe_binary() -> Path:
    """The probe, built statically once per source version (it runs in any image)."""
    source = SOURCE.read_bytes()
    binary = Path(tempfile.gettempdir()) / f"pomona-probe-{hashlib.sha256(source).hexdigest()[:12]}"
    if not binary.exists():
        staging = binary.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            ["cc", "-static", "-O2", "-o", str(staging), str(SOURCE)],
            check=True,
            capture_output=True,
        )
        staging.replace(binary)
    return binary


def host_namespaces() -> dict[str, str]:
    return {kind: str(os.stat(f"/proc/self/ns/{kind}").st_ino) for kind in NAMESPACES}


@contextlib.contextmanager
def host_abstract_socket() -> Iterator[str]:
    """An abstract unix socket listening in this process's network namespace: a sandbox that
    can connect to it shares the host's."""
    name = f"pomona-probe-{secrets.token_hex(6)}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0" + name)
    listener.listen(8)
    try:
        yield name
    finally:
        listener.close()


def parse(output: str, host_ns: dict[str, str]) -> Results:
    results: Results = {}
    for line in output.splitlines():
        name, _, rest = line.partition("\t")
        value, _, detail = rest.partition("\t")
        if name.startswith("@ns."):
            kind = name.removeprefix("@ns.")
            shared = value == host_ns.get(kind)
            results[f"ns.{kind}.host"] = ("yes" if shared else "no", value)
        elif name:
            results[name] = (value, detail)
    if len(results) < 60:
        raise AssertionError(f"the probe reported {len(results)} checks:\n{output[-2000:]}")
    return results


def less_strict(baseline: Results, candidate: Results) -> dict[str, str]:
    """Every check the baseline refuses that the candidate lets through (or could not run)."""
    found = {}
    for name, (verdict, _) in baseline.items():
        got, detail = candidate.get(name, ("missing", "not reported"))
        if verdict == "no" and got != "no":
            found[name] = f"{got} ({detail})"
    return found


def errors(results: Results) -> dict[str, str]:
    return {name: detail for name, (verdict, detail) in results.items() if verdict == "error"}


# -- the columns ------------------------------------------------------------------------------


def docker_default(image: str, user: str, engine: str = "docker") -> Results:
    """`docker run IMAGE sleep infinity`, then the probe through `docker exec`: the engine's
    defaults, with an init that is root and a command beside it, as in a Pomona sandbox."""
    binary = probe_binary()
    name = f"pomona-probe-{secrets.token_hex(4)}"
    started = subprocess.run(
        [engine, "run", "-d", "--rm", "--name", name, "-v", f"{binary}:/pomona-probe:ro", image]
        + ["sleep", "infinity"],
        capture_output=True,
        text=True,
    )
    if started.returncode:
        raise AssertionError(f"{engine} run failed: {started.stderr}")
    try:
        with host_abstract_socket() as abstract:
            argv = [engine, "exec", *(["-u", "1000:1000"] if user == "user" else [])]
            ran = subprocess.run(
                [*argv, name, "/pomona-probe", abstract],
                capture_output=True,
                text=True,
                timeout=300,
            )
        return parse(ran.stdout, host_namespaces())
    finally:
        subprocess.run([engine, "rm", "-f", name], capture_output=True)


def in_sandbox(client: SandboxClient, image: str, **spec: object) -> dict[str, Results]:
    """The probe as root and as the default user in one Pomona sandbox."""
    binary = probe_binary().read_bytes()
    found = {}
    with client.create_sandbox(image, timeout=900, **spec) as sb, host_abstract_socket() as name:  # type: ignore[arg-type]
        sb.write_file("/tmp/pomona-probe", binary, mode=0o755)
        for user in USERS:
            ran = sb.exec(
                ["/tmp/pomona-probe", name],
                user="root" if user == "root" else "pomona",
                timeout=300,
            )
            if ran.exit_code:
                raise AssertionError(f"the probe failed ({ran.exit_code}): {ran.stderr}")
            found[user] = parse(ran.stdout, host_namespaces())
    return found


@contextlib.contextmanager
def pomona_runtime(name: str) -> Iterator[tuple[SandboxClient, str]]:
    """(client, image) for one Pomona runtime; RuntimeUnavailable (or PodmanUnavailable) says
    why it cannot run on this machine."""
    state = tempfile.mkdtemp(prefix=f"differential-{name}-")
    if name == "local":
        with SandboxClient("local", state_dir=state) as client:
            yield client, "host"
        from pomona.orchestrator.runtimes.local import LocalRuntime

        LocalRuntime(state).unmount_store()
    elif name in ("docker", "gvisor"):
        from tests.images import debian_image

        with SandboxClient(name, state_dir=state) as client:
            yield client, debian_image()
    elif name == "podman":
        from tests.podman import IMAGE, podman_service

        with (
            podman_service() as (url, _),
            SandboxClient("podman", state_dir=state, base_url=url) as client,
        ):
            yield client, IMAGE
    elif name == "kubernetes":
        with _standin_client() as pair:
            yield pair
    else:
        raise ValueError(f"no column {name!r}")


@contextlib.contextmanager
def _standin_client() -> Iterator[tuple[SandboxClient, str]]:
    """The kubernetes runtime against the stand-in API server and kubelet (tests/kubernetes):
    its pods are Docker containers with the pod's securityContext."""
    from kubernetes import client

    from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime
    from tests.images import debian_image
    from tests.kubernetes import standin

    image, gate = debian_image(), standin.gate_image()
    with standin.running("pomona-differential") as (url, _):
        runtime = KubernetesRuntime(
            api=client.ApiClient(client.Configuration(host=url)),
            owner="differential",
            namespace="pomona-differential",
            gate_image=gate,
            snapshot_store=tempfile.mkdtemp(prefix="differential-k8s-"),
            image_pull_policy="Never",
            ready_timeout=120,
        )
        with SandboxClient(runtime) as sandboxes:
            yield sandboxes, image


COLUMNS = ("local", "docker", "podman", "gvisor", "kubernetes")


# -- the table --------------------------------------------------------------------------------

MARK = {"yes": "**yes**", "no": "no", "error": "error", "missing": "-"}


def table(columns: dict[str, dict[str, Results]]) -> str:
    """A markdown table: one row per check, one column per runtime and user. Capabilities are
    folded into one row per capability that any column holds."""
    heads = [f"{name}, {user}" for name, by_user in columns.items() for user in by_user]
    cells = [results for by_user in columns.values() for results in by_user.values()]
    names = list(next(iter(cells)))
    lines = ["| check | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    held_nowhere = []
    for name in names:
        verdicts = [c.get(name, ("missing", ""))[0] for c in cells]
        if name.startswith("cap.") and all(v == "no" for v in verdicts):
            held_nowhere.append(name.removeprefix("cap."))
            continue
        lines.append(f"| `{name}` | " + " | ".join(MARK.get(v, v) for v in verdicts) + " |")
    if held_nowhere:
        lines.append(
            f"| the other {len(held_nowhere)} capability checks (`cap.eff.*`, `cap.bnd.*`) | "
            + " | ".join("no" for _ in heads)
            + " |"
        )
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> int:
    """Every column this machine can run, into docs/security.md."""
    from tests.images import debian_image

    image = debian_image()
    found = {"docker run": {user: docker_default(image, user) for user in USERS}}
    for name in COLUMNS:
        try:
            with pomona_runtime(name) as (client, image):
                found[name] = in_sandbox(client, image)
        except Exception as e:  # a column this machine cannot run: say so, keep the others
            print(f"{name}: not run: {e}", file=sys.stderr)
    write_doc(table(found))
    print(table(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
