"""The kubernetes runtime end to end, through the official client and the real exec and
port-forward WebSocket protocols, against the stand-in API server and kubelet (standin.py: pods
are Docker containers with the pod's securityContext; no control plane can run here). What this
shows beyond the offline object tests: the gate and the runtime together give exec, files,
terminals, ports, snapshots and adoption the same behaviour as the other runtimes, inside a
container with every capability dropped but the five root keeps."""

from __future__ import annotations

import io
import os
import signal
import tarfile
import time
import uuid

import pytest

from pomona import SandboxClient
from pomona.errors import (
    FileNotFoundInSandbox,
    InvalidRequest,
    PathOutsideSandbox,
    RuntimeUnavailable,
    SandboxConflict,
)
from pomona.orchestrator.runtimes.kubernetes import objects
from pomona.orchestrator.types import ExecChunk, ExecResult
from tests.conftest import docker_available

pytestmark = pytest.mark.skipif(
    not docker_available(), reason="the stand-in kubelet runs pods on Docker (./dev services)"
)
NAMESPACE = "pomona-test"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.images import debian_image
    from tests.kubernetes import standin

    image, gate = debian_image(), standin.gate_image()
    with standin.running(NAMESPACE) as (url, server):
        yield url, server, image, gate, tmp_path_factory.mktemp("snapshots")


def runtime(cluster, owner: str, **settings):
    from kubernetes import client

    from pomona.orchestrator.runtimes.kubernetes.runtime import KubernetesRuntime

    url, _, _, gate, snapshots = cluster
    return KubernetesRuntime(
        api=client.ApiClient(client.Configuration(host=url)),
        owner=owner,
        namespace=NAMESPACE,
        gate_image=gate,
        snapshot_store=str(snapshots),
        image_pull_policy="Never",
        ready_timeout=120,
        **settings,
    )


@pytest.fixture(scope="module")
def k8s(cluster):
    with SandboxClient(runtime(cluster, "suite")) as c:
        yield c
    _, server, *_ = cluster
    left = (sorted(server.containers), sorted(server.policies))
    assert left == ([], []), f"the suite left pods or policies behind: {left}"


@pytest.fixture(scope="module")
def sb(k8s, cluster):
    with k8s.create_sandbox(cluster[2], labels={"run": "k8s-suite"}) as sandbox:
        yield sandbox


def test_every_object_sent_was_schema_valid_and_the_pod_hardened(sb, cluster):
    _, server, *_ = cluster
    kinds = {o["kind"] for o in server.received}
    assert {"Pod", "NetworkPolicy"} <= kinds  # the stand-in validates each one as it arrives
    assert sb.info.runtime == "kubernetes" and sb.exec("echo hi").stdout == "hi\n"
    (pod,) = (
        o
        for o in server.received
        if o["kind"] == "Pod" and o["metadata"]["name"] == objects.pod_name(sb.id)
    )
    assert pod["spec"]["hostUsers"] is False
    sandbox = pod["spec"]["containers"][0]
    assert sandbox["securityContext"]["procMount"] == "Default"
    # made without limits, it has the default ones, capped but not reserved
    cpu = min(2, os.cpu_count() or 1)
    assert sb.info.spec.limits.cpu == cpu and sb.info.spec.limits.memory
    assert sandbox["resources"]["limits"]["cpu"] == f"{cpu * 1000}m"
    assert sandbox["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}


def test_a_cluster_that_drops_host_users_is_refused_in_words(k8s, cluster):
    """An API server with UserNamespacesSupport off drops hostUsers: false; running that pod
    would make root in the sandbox root on the node."""
    server = cluster[1]
    before = (set(server.pods), set(server.policies))
    server.user_namespaces = False
    try:
        with pytest.raises(RuntimeUnavailable, match="dropped hostUsers: false.*host_users=True"):
            k8s.create_sandbox(cluster[2])
    finally:
        server.user_namespaces = True
    assert (set(server.pods), set(server.policies)) == before


def test_exec_semantics(sb):
    assert sb.exec(["printf", "%s|", "a b", "c'd", "$HOME"]).stdout == "a b|c'd|$HOME|"
    r = sb.exec("echo out; echo err >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (7, "out\n", "err\n", False)
    assert sb.exec("exit 124").exit_code == 124 and not sb.exec("exit 124").timed_out
    assert sb.exec(["definitely-not-a-binary"]).exit_code in (126, 127)
    sb.exec("mkdir -p /workspace/sub")
    r = sb.exec("pwd; echo $FOO; cat", cwd="/workspace/sub", env={"FOO": "bar"}, stdin="from stdin")
    assert r.stdout == "/workspace/sub\nbar\nfrom stdin"
    assert sb.exec("pwd").stdout == "/workspace\n"
    assert sb.exec("printf 'h\\303\\251llo'").stdout == "héllo"


def test_users_and_capabilities(sb):
    assert sb.exec("id -u").stdout.strip() == "1000"
    assert sb.exec("grep CapEff /proc/self/status").stdout.split()[1] == "0000000000000000"
    assert sb.exec("id -u", user="root").stdout.strip() == "0"
    assert sb.exec("touch /etc/pomona-test").exit_code != 0
    assert sb.exec("touch /etc/pomona-test", user="root").exit_code == 0
    # root holds exactly CHOWN, DAC_OVERRIDE, FOWNER, SETGID, SETUID: bits 0, 1, 3, 6, 7
    caps = int(sb.exec("grep CapEff /proc/self/status", user="root").stdout.split()[1], 16)
    assert caps == (1 << 0) | (1 << 1) | (1 << 3) | (1 << 6) | (1 << 7)


def test_timeout_kills_the_process_group_not_the_sandbox(sb):
    r = sb.exec("sleep 1000 & sleep 1001 & echo started; wait", timeout=5)
    assert r.timed_out and r.exit_code < 0 and r.stdout == "started\n"
    after = sb.exec("ps -eo args")
    assert after.exit_code == 0 and "sleep 100" not in after.stdout
    r = sb.exec("sleep 30 & echo holds-stdout", timeout=20)
    assert r.stdout == "holds-stdout\n" and not r.timed_out


def test_caps_and_streaming(sb):
    cap = 1024 * 1024
    r = sb.exec("yes pomona | head -c 5000000; echo done >&2", output_cap=cap, timeout=60)
    assert (
        r.exit_code == 0 and r.truncated and len(r.stdout.encode()) == cap and r.stderr == "done\n"
    )
    items = list(sb.exec_stream("echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three"))
    chunks = [i for i in items if isinstance(i, ExecChunk)]
    assert isinstance(items[-1], ExecResult) and items[-1].exit_code == 0
    assert [c.stream for c in chunks] == ["stdout", "stderr", "stdout"]


def test_a_consumer_that_stalls_gets_the_output_once(sb):
    # the exec's reader waits on a full queue for longer than it polls: nothing may come twice
    streamed, stalled = [], False
    for item in sb.exec_stream("head -c 8000000 /dev/zero | tr '\\0' x"):
        if isinstance(item, ExecChunk):
            streamed.append(item.data)
            if not stalled:
                time.sleep(2)
                stalled = True
    assert isinstance(item, ExecResult) and item.exit_code == 0 and not item.truncated
    assert "".join(streamed) == item.stdout == "x" * 8_000_000


def test_files_and_tar(sb):
    sb.write_file("/workspace/dir/a.txt", b"alpha", mode=0o600)
    sb.write_file("dir/b.txt", "beta")
    assert sb.read_file("/workspace/dir/a.txt") == b"alpha"
    assert [f.name for f in sb.list_files("dir")] == ["a.txt", "b.txt"]
    st = sb.stat("dir/a.txt")
    assert (st.type, st.size, st.mode) == ("file", 5, 0o600)
    assert sb.exec("stat -c %u dir/a.txt").stdout.strip() == "1000"
    data = os.urandom(300_000)
    sb.write_file("blob.bin", data)
    assert sb.read_file("blob.bin") == data
    sb.remove("dir/a.txt")
    with pytest.raises(FileNotFoundInSandbox):
        sb.read_file("dir/a.txt")
    with pytest.raises(InvalidRequest, match="non-empty"):
        sb.remove("dir")
    sb.remove("dir", recursive=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("pkg/mod.py")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"X = 1\n"))
        link = tarfile.TarInfo("pkg/link")
        link.type, link.linkname = tarfile.SYMTYPE, "mod.py"
        tar.addfile(link)
    sb.upload_dir("/workspace/proj", buf.getvalue())
    assert sb.exec("cat proj/pkg/link").stdout == "X = 1\n"
    names = set(tarfile.open(fileobj=io.BytesIO(sb.download_dir("proj"))).getnames())
    assert {"./pkg/mod.py", "./pkg/link"} <= names
    sb.exec("mkdir -p /workspace/up && ln -s /tmp /workspace/up/hostdir")
    escape = io.BytesIO()
    with tarfile.open(fileobj=escape, mode="w") as tar:
        info = tarfile.TarInfo("hostdir/evil")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(PathOutsideSandbox):
        sb.upload_dir("/workspace/up", escape.getvalue())
    sb.write_file("/../../../../tmp/escape.txt", b"inside")
    assert sb.exec("cat /tmp/escape.txt").stdout == "inside"


def test_terminal(sb):
    with sb.pty(
        ["bash", "-c", "tty -s && echo HAS_TTY; stty size; read _; stty size"], rows=24, cols=80
    ) as pty:
        out = b""
        deadline = time.monotonic() + 30
        while b"24 80" not in out and time.monotonic() < deadline:
            out += pty.read(timeout=0.5)
        assert b"HAS_TTY" in out
        pty.resize(50, 200)
        pty.write(b"\n")
        while b"50 200" not in out and time.monotonic() < deadline:
            out += pty.read(timeout=0.5)
        assert b"50 200" in out and pty.wait(timeout=30) == 0
    with sb.pty("sleep 60") as pty:
        pty.signal(signal.SIGKILL)
        assert pty.wait(timeout=30) == -9
    assert sb.exec("echo alive").stdout == "alive\n"


def test_port_connect(sb):
    sb.write_file(
        "/workspace/srv.py",
        (
            "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', 8765)); s.listen(1); print('up', flush=True)\n"
            "c, _ = s.accept(); c.sendall(b'echo:' + c.recv(100))\n"
        ),
    )
    sb.exec("python3 /workspace/srv.py > /tmp/srv.log 2>&1 &")
    deadline = time.monotonic() + 30
    while sb.exec("cat /tmp/srv.log").stdout != "up\n" and time.monotonic() < deadline:
        time.sleep(0.1)
    with sb.connect(8765) as conn:
        conn.sendall(b"ping")
        assert conn.recv(100) == b"echo:ping"


def test_snapshot_fork_and_in_use(k8s, sb):
    sb.write_file("state.txt", "base")
    snap = sb.snapshot()
    left, right = k8s.fork(snap, 2)
    try:
        left.exec("echo left > state.txt")
        assert left.read_file("state.txt") == b"left\n" and right.read_file("state.txt") == b"base"
        assert right.exec("stat -c %u state.txt").stdout.strip() == "1000"
        with pytest.raises(SandboxConflict, match="in use"):
            k8s.delete_snapshot(snap)
    finally:
        left.delete()
        right.delete()
    assert k8s.delete_snapshot(snap) is True and k8s.delete_snapshot(snap) is False


def test_a_new_process_adopts_its_pods_and_sees_no_one_elses(cluster):
    image = cluster[2]
    first = SandboxClient(runtime(cluster, "adopter"), auto_cleanup=False)
    sandbox_id = f"adopt-{uuid.uuid4().hex[:6]}"
    first.create_sandbox(image, sandbox_id=sandbox_id, labels={"run": "adopt"}).write_file(
        "kept", "yes"
    )
    first.close()
    with SandboxClient(runtime(cluster, "someone-else")) as stranger:
        assert stranger.list_sandboxes() == []
    with SandboxClient(runtime(cluster, "adopter")) as successor:
        assert [i.id for i in successor.list_sandboxes({"run": "adopt"})] == [sandbox_id]
        adopted = successor.get_sandbox(sandbox_id)
        assert adopted.read_file("kept") == b"yes"
        assert adopted.delete() is True
    assert not any(sandbox_id in name for name in cluster[1].containers)


def test_a_pod_that_cannot_start_is_removed_and_says_why(k8s, cluster):
    from pomona.errors import ImageNotFound

    server = cluster[1]
    before = (set(server.pods), set(server.policies))
    with pytest.raises(ImageNotFound, match="ErrImageNeverPull|not present"):
        k8s.create_sandbox("pomona-test/no-such-image:1")
    assert (set(server.pods), set(server.policies)) == before


def test_the_payload_comes_from_the_tools_image_read_only(cluster, tmp_path):
    """deploy/tools.Dockerfile built around a small payload; the init container copies it with
    the gate's busybox, as the nobody user, into the volume the sandbox mounts read-only."""
    import subprocess
    from pathlib import Path

    from pomona.orchestrator.types import Mount

    payload = tmp_path / "payload"
    (payload / "bin").mkdir(parents=True)
    (payload / "VERSIONS").write_text("hello 1.0\n")
    (payload / "bin" / "hello").write_text("#!/bin/sh\necho from-the-payload\n")
    (payload / "bin" / "hello").chmod(0o755)
    dockerfile = Path(__file__).resolve().parents[2] / "deploy" / "tools.Dockerfile"
    subprocess.run(
        ["docker", "build", "-q", "-f", str(dockerfile), "-t", "pomona-test/tools:1", str(payload)],
        check=True,
        capture_output=True,
    )
    tools = Mount(source="/var/cache/pomona/tools", target="/opt/pomona/tools")
    try:
        with (
            SandboxClient(runtime(cluster, "payload", tools_image="pomona-test/tools:1")) as client,
            client.create_sandbox(cluster[2], mounts=[tools]) as sandbox,
        ):
            assert sandbox.exec("/opt/pomona/tools/bin/hello").stdout == "from-the-payload\n"
            assert sandbox.exec("cat /opt/pomona/tools/VERSIONS").stdout == "hello 1.0\n"
            assert sandbox.exec("touch /opt/pomona/tools/x", user="root").exit_code != 0
    finally:
        subprocess.run(["docker", "rmi", "-f", "pomona-test/tools:1"], capture_output=True)


def test_a_warm_pool_pod_is_claimed_then_refilled(cluster):
    """A pool of ready pods per image: a sandbox of the pool's shape takes one (a conditional
    patch, no pod start), the pool refills, other shapes start cold, and close removes what is
    left unclaimed."""
    _, server, image, *_ = cluster

    def pool() -> list[str]:
        return [
            n
            for n, p in list(server.pods.items())
            if objects.WARM_LABEL in p["metadata"].get("labels", {}) and n in server.containers
        ]

    def wait_for(condition, what: str) -> None:
        deadline = time.monotonic() + 120
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)

    pooled = runtime(cluster, "pool", warm_pools={image: 1})
    with SandboxClient(pooled) as client:
        wait_for(lambda: len(pool()) == 1, "the pool to fill")
        (warm,) = pool()
        wait_for(lambda: warm in pooled.pools.made, "the pool pod to be ready")
        sandbox = client.create_sandbox(image, labels={"run": "warm"})
        assert server.pods[warm]["metadata"]["annotations"][objects.ID_ANNOTATION] == sandbox.id
        assert sandbox.exec("id -u; pwd").stdout == "1000\n/workspace\n"
        assert [s.id for s in client.list_sandboxes({"run": "warm"})] == [sandbox.id]
        assert warm not in server.policies and objects.pod_name(sandbox.id) in server.policies
        wait_for(lambda: pool() and pool() != [warm], "the pool to refill")
        cold = client.create_sandbox(image, memory="256Mi")  # another shape
        assert objects.pod_name(cold.id) in server.pods
        sandbox.delete()
        cold.delete()
        assert warm not in server.pods
    assert pool() == [] and not [n for n in server.policies if "warm" in n]


def test_a_pool_pod_claimed_elsewhere_is_not_taken_twice(cluster):
    """Two replicas race for one pool pod: the second's patch carries the resourceVersion it
    listed, the server refuses it (409), and the pod stays the first replica's sandbox."""
    import asyncio

    from pomona.orchestrator.runtimes.kubernetes import objects
    from pomona.orchestrator.types import SandboxSpec

    _, server, image, *_ = cluster
    first = runtime(cluster, "race", warm_pools={image: 1})
    with SandboxClient(first) as client:
        deadline = time.monotonic() + 120
        while not first.pools.made:
            assert time.monotonic() < deadline, "the pool never filled"
            time.sleep(0.1)
        (warm,) = first.pools.made
        selector = first.cluster.selector(**{objects.WARM_LABEL: objects.id_hash(image)})
        stale = first.cluster.core.list_namespaced_pod(
            NAMESPACE, label_selector=selector
        )  # the race window
        winner = client.create_sandbox(image)
        second = runtime(cluster, "race")  # no pool of its own: nothing refills behind the test
        second.cluster.core.list_namespaced_pod = lambda *a, **k: stale
        spec = SandboxSpec(image=image)
        metadata = objects.sandbox_pod("loser", spec, second.settings, "race", 1.0)["metadata"]
        assert asyncio.run(second.pools.claim("loser", spec, metadata, 1.0)) is None
        assert server.pods[warm]["metadata"]["annotations"][objects.ID_ANNOTATION] == winner.id
        winner.delete()


def test_volume_snapshots_when_the_csi_driver_takes_them(cluster):
    """With a workspace storage class and a VolumeSnapshotClass the workdir is its own volume:
    a snapshot is a VolumeSnapshot, a fork a pod whose workspace claim is restored from it."""
    _, server, image, *_ = cluster
    with SandboxClient(
        runtime(cluster, "csi", workspace_storage_class="standin", snapshot_class="standin")
    ) as client:
        with client.create_sandbox(image, disk="1Gi") as original:
            original.write_file("state.txt", "base")
            assert original.exec("stat -c %u /workspace").stdout.strip() == "1000"
            snap = original.snapshot()
            assert len(server.snapshots) == 1
            (fork,) = client.fork(snap, 1)
            fork.exec("echo forked > state.txt")
            assert (
                fork.read_file("state.txt") == b"forked\n"
                and original.read_file("state.txt") == b"base"
            )
            with pytest.raises(SandboxConflict, match="in use"):
                client.delete_snapshot(snap)
            fork.delete()
        assert [s.id for s in client.list_snapshots()] == [snap.id]
        assert client.delete_snapshot(snap) is True and server.snapshots == {}
