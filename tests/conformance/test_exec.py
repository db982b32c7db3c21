"""Exec semantics: argv and shell strings, cwd/env/stdin, exit codes, timeouts, caps, streaming."""

from __future__ import annotations

import time

from pomona.orchestrator.types import ExecChunk, ExecResult


def test_argv_keeps_quoting(sandbox):
    r = sandbox.exec(["printf", "%s|", "a b", "c'd", "$HOME"])
    assert r.stdout == "a b|c'd|$HOME|"


def test_shell_string_exit_code_and_stderr(sandbox):
    r = sandbox.exec("echo out; echo err >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (7, "out\n", "err\n", False)


def test_exit_124_is_not_a_timeout(sandbox):
    r = sandbox.exec("exit 124")
    assert r.exit_code == 124 and not r.timed_out


def test_missing_binary(sandbox):
    assert sandbox.exec(["definitely-not-a-binary"]).exit_code in (126, 127)


def test_cwd_env_stdin(sandbox):
    sandbox.exec("mkdir -p /workspace/sub")
    r = sandbox.exec(
        "pwd; echo $FOO; cat", cwd="/workspace/sub", env={"FOO": "bar"}, stdin="from stdin"
    )
    assert r.stdout == "/workspace/sub\nbar\nfrom stdin"
    assert sandbox.exec("pwd").stdout == "/workspace\n"
    bad = sandbox.exec("true", cwd="/does/not/exist")
    assert (
        bad.exit_code != 0
        and "exist" in (bad.stderr + bad.stdout).lower()
        or "can't cd" in bad.stderr
    )


def test_runs_unprivileged_by_default_and_root_on_request(sandbox):
    assert sandbox.exec("id -u").stdout.strip() == "1000"
    assert sandbox.exec("id -u", user="root").stdout.strip() == "0"
    assert sandbox.exec("touch /etc/pomona-test").exit_code != 0
    assert sandbox.exec("touch /etc/pomona-test", user="root").exit_code == 0


def test_timeout_kills_the_process_group_not_the_sandbox(sandbox):
    r = sandbox.exec("sleep 1000 & sleep 1001 & echo started; wait", timeout=3)
    assert r.timed_out and r.exit_code < 0 and r.stdout == "started\n"
    after = sandbox.exec("ps -eo args")
    assert after.exit_code == 0
    assert "sleep 100" not in after.stdout  # the whole group died, background children too


def test_background_process_does_not_hang_exec(sandbox):
    r = sandbox.exec("sleep 30 > /dev/null 2>&1 & echo spawned", timeout=20)
    assert r.stdout == "spawned\n" and not r.timed_out
    r = sandbox.exec("sleep 30 & echo holds-stdout", timeout=20)
    assert r.stdout == "holds-stdout\n" and not r.timed_out


def test_a_slow_consumer_gets_the_whole_output(sandbox):
    # the command exits at once, its output queued; the consumer takes its time with each chunk
    streamed = []
    for item in sandbox.exec_stream("head -c 600000 /dev/zero | tr '\\0' x"):
        if isinstance(item, ExecChunk):
            streamed.append(item.data)
            time.sleep(0.1)
    assert isinstance(item, ExecResult) and item.exit_code == 0 and not item.truncated
    assert "".join(streamed) == item.stdout == "x" * 600_000


def test_output_flood_is_capped_and_flagged(sandbox):
    cap = 1024 * 1024
    r = sandbox.exec("yes pomona | head -c 20000000; echo done >&2", output_cap=cap, timeout=60)
    assert r.exit_code == 0 and r.truncated
    assert len(r.stdout.encode()) == cap and r.stdout.startswith("pomona\npomona\n")
    assert r.stderr == "done\n"
    small = sandbox.exec("echo short")
    assert not small.truncated


def test_streaming_yields_output_before_the_result(sandbox):
    items = list(sandbox.exec_stream("echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three"))
    chunks = [i for i in items if isinstance(i, ExecChunk)]
    assert isinstance(items[-1], ExecResult) and items[-1].exit_code == 0
    assert [c.stream for c in chunks] == ["stdout", "stderr", "stdout"]
    assert "".join(c.data for c in chunks) == "one\ntwo\nthree\n"


def test_login_shell(sandbox):
    sandbox.write_file("/home/pomona/.profile", "export FROM_PROFILE=yes\n")
    assert sandbox.exec("echo $FROM_PROFILE", login_shell=True).stdout == "yes\n"
    assert sandbox.exec("echo $FROM_PROFILE").stdout == "\n"


def test_utf8_and_binary_output(sandbox):
    assert sandbox.exec("printf 'h\\303\\251llo'").stdout == "héllo"
    r = sandbox.exec("printf '\\377\\376'")
    assert r.exit_code == 0 and r.stdout == "\ufffd\ufffd"


def test_threads_and_processes_start_under_the_syscall_filter(sandbox):
    """libc starts a thread with clone3 and falls back to clone only on ENOSYS: a filter that
    refused clone3 with anything else would leave every threaded program (Python's servers,
    Node, Chromium) unable to start one."""
    r = sandbox.exec(
        [
            "python3",
            "-c",
            "import os, threading\n"
            "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
            "pid = os.fork()\n"
            "if pid == 0: os._exit(3)\n"
            "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))",
        ]
    )
    assert (r.exit_code, r.stdout) == (0, "thread\nchild 3\n"), r.stderr
