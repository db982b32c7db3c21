"""What a Terminal-Bench task may ask for beyond one instruction and one test script, run for real
through harnesses: multi-step tasks (one episode, a harness run per step, each step verified in
its own sandbox), the task's MCP servers given to the harness, per-phase network policies (the
agent and the verifier each on their own), per-task agent timeouts; and task.toml read as
harbor reads it, refusing with the reason what Pomona cannot honour."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pomona.benchmarks import terminal_bench as tb
from pomona.benchmarks.terminal_bench.config import Network, read_config
from pomona.episodes import EpisodeRecord, run_episode
from pomona.harnesses import payload
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.control import ProxyControl, calls_of, proxy_control
from tests.benchmarks.test_terminal_bench import TASKS, copy_task, play

EXTRAS = tb.DATA / "extras"


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyControl]:
    with ProxyServer(ProxyConfig(trajectories=tmp_path_factory.mktemp("runs"))) as server:
        yield proxy_control(server)


def episode(
    task: tb.TbTask,
    harness: str,
    proxy: ProxyControl,
    client: Any,
    solution: tuple[str, ...] | None = None,
) -> EpisodeRecord:
    """One harness episode with the oracle model (replaying `solution` when given)."""
    if missing := payload.ensure([harness]):
        pytest.fail(f"harness payload unavailable: {missing}")
    if solution is not None:
        import dataclasses

        task = dataclasses.replace(task, solution=solution)
    return run_episode(task, harness, "oracle", proxy=proxy, client=client, timeout=600)


# --- task.toml ---------------------------------------------------------------------------------


def write(d: Path, toml: str) -> Path:
    (d / "task.toml").write_text(toml)
    return d


def test_task_toml_is_read_as_harbor_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = copy_task(tmp_path, "count-errors")
    text = (d / "task.toml").read_text()
    cfg = read_config(d)
    assert (cfg.verifier_mode(), cfg.agent_timeout, cfg.verifier.timeout) == (
        "separate",
        600.0,
        300.0,
    )
    assert [a.source for a in cfg.artifacts] == ["/app/report.json"]
    # allow_internet = false is the legacy spelling of no-network, for both phases
    assert (cfg.agent_phase(), cfg.verifier_phase()) == (Network("no-network"),) * 2
    assert tb.load_task(d).environment.network == "gateway"  # the agent always has the proxy
    # a baseline left unset is public, as in harbor; a phase override wins over it
    public = text.replace("allow_internet = false\n", "")
    cfg = read_config(write(d, public + '\n[verifier.environment]\nnetwork_mode = "no-network"\n'))
    assert (cfg.agent_phase(), cfg.verifier_phase()) == (Network("public"), Network("no-network"))
    assert tb.load_task(d).environment.network == "full"
    shared = text.replace('environment_mode = "separate"', 'environment_mode = "shared"')
    cfg = read_config(
        write(
            d,
            shared.replace(
                "[verifier]\n",
                '[verifier]\nuser = "agent"\nenv = { TOKEN = "${POMONA_TEST_TOKEN:-none}" }\n',
            )
            + '\n[[verifier.collect]]\ncommand = "echo collected"\n',
        )
    )
    assert cfg.verifier_mode() == "shared" and tb.load_task(d).scorer.resolved_mode() == "shared"
    assert (cfg.verifier.user, cfg.verifier.collect[0].command) == ("pomona", "echo collected")
    monkeypatch.setenv("POMONA_TEST_TOKEN", "t0k")
    assert tb.resolve_env(cfg.verifier.env) == {"TOKEN": "t0k"}


def test_steps_inherit_as_in_harbor() -> None:
    task = next(t for t in TASKS if t.metadata["steps"])
    cfg = task.config
    convert, restock = cfg.steps
    assert (convert.min_reward, cfg.agent_timeout_of(convert), cfg.agent_timeout_of(restock)) == (
        1.0,
        600.0,
        300.0,
    )
    assert task.agent_timeout(900) == 600.0  # the first turn's budget
    assert [a.source for a in restock.artifacts] == ["/app/reports"]
    assert cfg.verifier_mode(restock) == "separate"  # inherited from [verifier]
    assert task.instruction.startswith("/app/inventory.csv")
    assert task.metadata["instructions"][1].startswith("A delivery has arrived")


REFUSED = [
    ('[[steps]]\nname = "../up"\n', "portable directory name"),
    ('[[steps]]\nname = "a"\n[[steps]]\nname = "A"\n', "unique"),
    (
        '[environment]\nnetwork_mode = "no-network"\n[[steps]]\nname = "a"\n[steps.agent]\n'
        'network_mode = "public"\n[[steps]]\nname = "b"\n',
        "different agent networks",
    ),
    (
        '[[steps]]\nname = "a"\n[steps.agent]\nuser = "root"\n[[steps]]\nname = "b"\n',
        "different users",
    ),
    ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "allow-list"),
    ('[agent]\nallowed_hosts = ["pypi.org"]\n', "only valid with network_mode"),
    ('[environment]\nos = "windows"\n', "Linux only"),
    ("[environment]\ngpus = 1\n", "GPUs"),
    ('artifacts = [{ source = "x", service = "db" }]\n', "absolute source"),
    ('[[environment.mcp_servers]]\nname = "docs"\nurl = "http://docs:8000/sse"\n', "sse"),
    (
        '[[environment.mcp_servers]]\nname = "x y"\ntransport = "stdio"\ncommand = "/bin/x"\n',
        "letters, digits",
    ),
    ('[[environment.mcp_servers]]\nname = "x"\ntransport = "stdio"\n', "command"),
    (
        '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ndocker_image = "x"\n',
        "conflicts",
    ),
    # a shared verifier keeps the agent's network: one that needs the internet cannot have it
    (
        '[agent]\nnetwork_mode = "no-network"\n[verifier]\nenvironment_mode = "shared"\n'
        'network_mode = "public"\n',
        "a shared verifier",
    ),
    ("not [ toml", "not valid TOML"),
]


@pytest.mark.parametrize(("toml", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_what_cannot_work_is_refused_with_the_reason(
    tmp_path: Path, toml: str, message: str
) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "instruction.md").write_text("do it\n")
    write(d, toml + '\n[metadata]\npomona_image = "host"\n')
    with pytest.raises(ValueError, match=message):
        tb.load_task(d)


COMPOSE_REFUSED = [
    ("db:\n    image: postgres:16\n    expose: [5432]\n", "no entrypoint or command"),
    ("db:\n    image: postgres:16\n    command: postgres\n", "no port"),
    ("db:\n    build: ./db\n    command: x\n    expose: [1]\n", "does not build images"),
    ("db:\n    image: x\n    command: x\n    expose: [1]\n    privileged: true\n", "privileged"),
    (
        "db:\n    image: x\n    command: x\n    expose: [1]\n    volumes: [/etc:/etc]\n",
        "not a path in the task",
    ),
    ("db:\n    image: x\n    command: x\n    expose: [1]\n    depends_on: [db]\n", "cycle"),
    (
        "db:\n    image: x\n    command: x\n    expose: [1]\n    healthcheck:\n      test: x\n"
        "      interval: soon\n",
        "duration",
    ),
]


@pytest.mark.parametrize(
    ("service", "message"), COMPOSE_REFUSED, ids=[m for _, m in COMPOSE_REFUSED]
)
def test_sidecars_pomona_cannot_run_are_refused_with_the_reason(
    tmp_path: Path, service: str, message: str
) -> None:
    d = copy_task(tmp_path, "count-errors")
    (d / "environment" / "docker-compose.yaml").write_text("services:\n  main: {}\n  " + service)
    with pytest.raises(ValueError, match=message):
        tb.load_task(d)


def test_hooks_and_artifacts_must_name_a_service_the_task_has(tmp_path: Path) -> None:
    d = copy_task(tmp_path, "count-errors")
    write(
        d, '[[verifier.collect]]\ncommand = "x"\nservice = "db"\n' + (d / "task.toml").read_text()
    )
    with pytest.raises(ValueError, match="services the task does not have: db"):
        tb.load_task(d)


# --- multi-step tasks ----------------------------------------------------------------------------


def test_a_multi_step_task_through_a_harness(client: Any, proxy: ProxyControl) -> None:
    """One episode, one sandbox, a fresh harness session per step: the oracle (the same command
    every step, running the step's own solution) solves both steps, each verified in its own
    sandbox before the next step's files arrive."""
    task = next(t for t in TASKS if t.metadata["steps"])
    record = episode(task, "pi", proxy, client)
    assert (record.failure_kind, record.reward) == ("none", 1.0), record.failure_message
    steps = record.score["details"]["steps"]
    assert [(s["step"], s["rewards"], s["mode"], s["network"]) for s in steps] == [
        ("convert", {"reward": 1.0}, "separate", "none"),
        ("restock", {"reward": 1.0}, "separate", "none"),
    ]
    prompts = [c["request"] for c in calls_of(proxy, record.episode)]
    assert sum("/app/inventory.csv lists" in p for p in prompts) >= 1
    assert sum("A delivery has arrived" in p for p in prompts) >= 1
    assert not any("/app/inventory.csv lists" in p and "A delivery" in p for p in prompts)


def test_a_multi_step_task_call_by_call(state_dir: str, proxy: ProxyControl) -> None:
    """ModelCallEnv: the policy answers every model call of pi; when pi finishes a step, the
    step is checked and pi starts again on the next one, its calls still coming as steps."""
    from pomona.gym.model_call_env import ModelCallEnv
    from tests.gym.conftest import solve_with

    task = next(t for t in TASKS if t.metadata["steps"])
    if missing := payload.ensure(["pi"]):
        pytest.fail(f"harness payload unavailable: {missing}")
    env = ModelCallEnv(harness="pi", tasks=[task], state_dir=state_dir, proxy=proxy)
    policy, seen = solve_with(list(task.solution)), []
    try:
        obs, info = env.reset(options={"task": task.id})
        for _ in range(12):
            seen.append(obs["messages"])
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            if terminated or truncated:
                break
    finally:
        env.close()
    assert (info["failure"], reward, terminated) == ("none", 1.0, True), info
    assert [s["step"] for s in info["score"]["details"]["steps"]] == ["convert", "restock"]
    assert any("A delivery has arrived" in m for m in seen)


def test_a_step_whose_setup_breaks_is_a_verifier_failure(state_dir: str, tmp_path: Path) -> None:
    d = copy_task(tmp_path, "inventory-steps")
    (d / "steps" / "restock" / "workdir" / "setup.sh").write_text("echo no shelf >&2; exit 3\n")
    reward, info = play(state_dir, tb.load_task(d), oracle=True)
    assert info["failure"] == "verifier" and "setup.sh exited 3" in info["error"], info


def test_a_step_left_undone_counts_zero(state_dir: str) -> None:
    task = next(t for t in TASKS if t.metadata["steps"])
    reward, info = play(state_dir, task, oracle=True, steps=1)  # step 2 gets no commands
    details = info["score"]["details"]
    assert (reward, [s["rewards"]["reward"] for s in details["steps"]]) == (0.5, [1.0, 0.0])
    assert details["stopped_after"] is None and details["strategy"] == "mean"


# --- MCP servers ---------------------------------------------------------------------------------


def test_the_tasks_mcp_server_reaches_the_harness(client: Any, proxy: ProxyControl) -> None:
    """The scripted model calls the task's own MCP tool through Claude Code's MCP client: the
    registry records the release, and the separate verifier finds it there."""
    task = tb.load_task(EXTRAS / "mcp-release")
    (server,) = task.environment.mcp
    assert (server.name, server.command) == (
        "registry",
        ("/usr/bin/python3", "/app/.registry/server.py"),
    )
    call = json.dumps({"tool": "publish", "server": "registry", "arguments": {"version": "2.4.1"}})
    record = episode(task, "claude-code", proxy, client, solution=(call,))
    assert (record.failure_kind, record.reward) == ("none", 1.0), record.failure_message
    assert any("published 2.4.1" in c["request"] for c in calls_of(proxy, record.episode))
    # a harness without an MCP client cannot take the task: an infra failure, not a 0
    record = episode(task, "pi", proxy, client)
    assert (record.failure_kind, record.reward) == ("harness", None)
    assert "MCP" in record.failure_message


# --- sidecar services ----------------------------------------------------------------------------


def services_left(client: Any) -> list[str]:
    """The task's sidecar sandboxes still there, once their owner is gone (the bridge deletes
    them when it sees its sandbox go; this waits for that, generously)."""
    for _ in range(600):
        left = [s.id for s in client.list_sandboxes({"purpose": "tb-service"})]
        if not left:
            return []
        time.sleep(0.1)
    return left


def test_sidecar_services_run_beside_the_agent(state_dir: str, client: Any) -> None:
    """The ticket service runs in a sandbox of its own; the agent reaches it at api:8080 and
    cannot see its files; a collect hook exports its state in the service and the separate
    verifier gets it as an artifact (with fresh sidecars of its own, as harbor's separate
    environment has). Nothing of theirs is left after the episode."""
    task = tb.load_task(EXTRAS / "ticket-triage")
    assert [(s.name, s.image, s.ports) for s in task.services] == [("api", "host", (8080,))]
    look = "getent hosts api && test ! -e /srv/api && echo isolated"
    reward, info = play(state_dir, task, oracle=True, commands=(look,))
    assert (reward, info["failure"]) == (1.0, "none"), info
    (hook,) = info["score"]["details"]["collect"]
    assert (hook["service"], hook["exit_code"]) == ("api", 0)
    assert play(state_dir, task, oracle=False)[0] == 0.0
    assert services_left(client) == []


def test_a_shared_verifier_reaches_the_agents_sidecars(
    state_dir: str, client: Any, tmp_path: Path
) -> None:
    """In shared mode (a task that asks for it) the tests run in the agent's own sandbox, which
    reaches the very services the agent changed."""
    d = copy_task(tmp_path, "ticket-triage", root=EXTRAS)
    (d / "tests" / "test_outputs.py").write_text(
        "import json, urllib.request\n\n\ndef test_asked_over_the_network():\n"
        "    tickets = json.load(urllib.request.urlopen('http://api:8080/tickets', timeout=30))\n"
        "    assert sorted(t['id'] for t in tickets if t['status'] == 'closed') == [101, 103, 105]\n"
    )
    task = tb.load_task(d, verifier_mode="shared")
    reward, info = play(state_dir, task, oracle=True)
    assert (reward, info["failure"], info["score"]["details"]["verifier_mode"]) == (
        1.0,
        "none",
        "shared",
    )
    assert play(state_dir, task, oracle=False)[0] == 0.0
    assert services_left(client) == []


def test_a_service_that_never_gets_healthy_fails_the_set_up_and_leaves_nothing(
    client: Any, tmp_path: Path
) -> None:
    d = copy_task(tmp_path, "ticket-triage", root=EXTRAS)
    compose = d / "environment" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text()
        .replace(
            'command: ["python3", "/srv/api/server.py"]',
            """command: ["sh", "-c", "echo cannot open the ticket database; exit 1"]""",
        )
        .replace("start_period: 10s", "start_period: 0s")
        .replace("retries: 30", "retries: 2")
    )
    task = tb.load_task(d)
    with (
        client.create_sandbox("host", network="none", workdir="/app") as agent,
        pytest.raises(RuntimeError, match="cannot open the ticket database"),
    ):
        task.prepare(agent)
    assert services_left(client) == []


def test_two_episodes_on_the_hosts_network_keep_their_own_services(
    state_dir: str, client: Any
) -> None:
    """Sandboxes with the host's network (`full` on the local runtime) share one loopback: each
    episode's relay takes addresses of its own, so two at once neither collide nor mix."""
    import gymnasium as gym

    task = tb.load_task(EXTRAS / "ticket-triage")
    envs = [
        gym.make("pomona/ShellEnv-v0", tasks=[task], state_dir=state_dir, network="full")
        for _ in range(2)
    ]
    try:
        for env in envs:
            env.reset(options={"task": task.id})
        hosts = [env.unwrapped.sandbox.exec("getent hosts api", timeout=30).stdout for env in envs]
        assert hosts[0] != hosts[1]
        for env in envs:
            for command in task.solution:
                assert env.step(command)[4]["exit_code"] == 0
        assert [env.step("submit")[1] for env in envs] == [1.0, 1.0]
    finally:
        for env in envs:
            env.close()
    assert services_left(client) == []


def test_sidecar_services_through_a_harness(client: Any, proxy: ProxyControl) -> None:
    """pi in a gateway sandbox (the model proxy only) reaches the ticket service through the
    relay."""
    record = episode(tb.load_task(EXTRAS / "ticket-triage"), "pi", proxy, client)
    assert (record.failure_kind, record.reward) == ("none", 1.0), record.failure_message
    assert services_left(client) == []


FAKE_RELAY = """
import socket
server = socket.socket()
server.bind(("127.0.0.1", 7000))
server.listen()
open("/tmp/ready", "w").close()
with open("/tmp/fake.log", "w") as log:
    for said in (b"x" * 1000, b"127.0.0.10:2222\\nping", b"127.0.0.10:8080\\nping"):
        channel, _ = server.accept()
        channel.sendall(said)
        log.write(repr(channel.recv(100)) + "\\n")
        log.flush()
"""
ECHO = """
import socket, threading
def echo(server):
    while True:
        client, _ = server.accept()
        client.sendall(client.recv(100))
        client.close()
for port in (8080, 2222):  # 2222: listening, but not a port the service lists
    server = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=echo, args=(server,)).start()
open("/tmp/ready", "w").close()
"""


def test_a_relay_the_agent_replaced_cannot_steer_the_bridge(client: Any) -> None:
    """What the relay says comes from the sandbox: a route line that never ends, or one naming
    a port the service does not list, gets the channel closed; only a listed route is joined."""
    from pomona.benchmarks.terminal_bench.services import _Bridge

    with (
        client.create_sandbox("host", network="none", user="root") as agent,
        client.create_sandbox("host", network="none") as service,
    ):
        for sandbox, program in ((agent, FAKE_RELAY), (service, ECHO)):
            sandbox.write_file("/tmp/p.py", program)
            sandbox.exec("(setsid python3 /tmp/p.py > /tmp/p.out 2>&1 < /dev/null &)", timeout=60)
        for sandbox in (agent, service):
            wait = "for i in $(seq 600); do test -e /tmp/ready && exit 0; sleep 0.1; done; exit 1"
            assert sandbox.exec(wait, timeout=120).exit_code == 0
        bridge = _Bridge(agent, 7000, {b"127.0.0.10:8080": (service, 8080)}, on_gone=None)
        try:
            for _ in range(600):
                log = agent.exec("cat /tmp/fake.log 2>/dev/null", timeout=30).stdout.split()
                if len(log) == 3:
                    break
                time.sleep(0.1)
        finally:
            bridge.stop()
    assert log == ["b''", "b''", "b'ping'"]


# --- per-phase network policy --------------------------------------------------------------------


class _AnswerKey(http.server.BaseHTTPRequestHandler):
    """A grading service on the host's loopback: it serves the answer key and remembers every
    path asked for."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        self.seen.append(self.path)
        body = json.dumps({"river": 3, "mill": 2, "wheel": 2, "miller": 2}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answer_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnswerKey)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("POMONA_TB_ANSWER_KEY_URL", f"{url}/key")
    _AnswerKey.seen = []
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_agent_and_verifier_each_get_their_own_network(
    client: Any, proxy: ProxyControl, answer_key: str, tmp_path: Path
) -> None:
    """The agent (no network: the model proxy only) cannot reach the grading service; the
    verifier (public) fetches the answer key from it. With a public agent phase the agent
    reaches it too."""
    task = tb.load_task(EXTRAS / "answer-key")
    probe = (
        f"python3 -c \"import urllib.request as u; u.urlopen('{answer_key}/probe', timeout=10)\""
        " || echo unreachable"
    )
    record = episode(task, "pi", proxy, client, solution=(probe, *task.solution))
    assert (record.failure_kind, record.reward) == ("none", 1.0), record.failure_message
    assert record.score["details"]["verifier_network"] == "full"
    assert _AnswerKey.seen == ["/key"]  # the verifier's fetch, and no probe from the agent
    d = copy_task(tmp_path, "answer-key", root=EXTRAS)
    write(
        d, (d / "task.toml").read_text().replace("[agent]\n", '[agent]\nnetwork_mode = "public"\n')
    )
    record = episode(tb.load_task(d), "pi", proxy, client, solution=(probe, *task.solution))
    assert (record.failure_kind, record.reward) == ("none", 1.0), record.failure_message
    assert _AnswerKey.seen == ["/key", "/probe", "/key"]


def test_a_verifier_without_the_network_it_needs_is_a_verifier_failure(
    state_dir: str, answer_key: str, tmp_path: Path
) -> None:
    d = copy_task(tmp_path, "answer-key", root=EXTRAS)
    write(
        d,
        (d / "task.toml")
        .read_text()
        .replace('network_mode = "public"\nenv', 'network_mode = "no-network"\nenv'),
    )
    reward, info = play(state_dir, tb.load_task(d), oracle=True)
    assert info["failure"] == "verifier" and "RewardFileNotFoundError" in info["error"], info
    assert _AnswerKey.seen == []


# --- budgets -------------------------------------------------------------------------------------


def test_the_tasks_own_agent_timeout_is_applied(
    client: Any, proxy: ProxyControl, tmp_path: Path
) -> None:
    d = copy_task(tmp_path, "nested-archive", {"solution/solve.sh": "#!/bin/bash\nsleep 300\n"})
    write(
        d,
        (d / "task.toml")
        .read_text()
        .replace("[agent]\ntimeout_sec = 600.0", "[agent]\ntimeout_sec = 5.0"),
    )
    task = tb.load_task(d)
    assert task.agent_timeout(600) == 5.0
    record = episode(task, "pi", proxy, client)
    assert record.failure_kind == "timeout", record.failure_message


@pytest.mark.parametrize("name", ["mcp-release", "answer-key"])
def test_extras_oracle_scores_one_and_noop_scores_zero(
    state_dir: str, answer_key: str, name: str
) -> None:
    """The extra tasks (an MCP server; a grading service) are whole harbor tasks too: their
    oracle (speaking JSON-RPC to the registry itself; counting words) passes, doing nothing
    fails."""
    task = tb.load_task(EXTRAS / name)
    for f in ("instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
        assert (EXTRAS / name / f).is_file(), f
    assert play(state_dir, task, oracle=True)[0] == 1.0
    reward, info = play(state_dir, task, oracle=False)
    assert (reward, info["failure"]) == (0.0, "none"), info
