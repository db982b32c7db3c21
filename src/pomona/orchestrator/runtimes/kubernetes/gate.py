"""The in-pod gate: what runs inside a sandbox pod so the exec subresource has the local
runtime's semantics. It is POSIX sh for a static busybox that an init container copies into
every pod (the image needs no shell, no coreutils, no Python of its own).

Why a gate at all: an exec through the API server starts one process and, when its stream
closes, leaves that process running; it cannot choose a user, a working directory or a process
group, cannot half-close stdin on the v4 protocol, and ends only when every holder of the
command's stdout has closed it. The gate fixes each:
- the command runs in its own session (busybox `setsid`; a child of a non-interactive shell is
  never a group leader, so setsid succeeds in place and the pid is the process group id), and
  its pid is written to a root-only run directory, so a second exec (`KILL`) can SIGKILL the
  whole group, never the sandbox's idle process;
- it drops to the sandbox user (`nsenter -S -G`: setgroups([]), setgid, setuid; every
  capability goes) unless the caller passes no uid (the pod already runs as that user);
- stdin is length-prefixed by the caller (`head -c N`), so EOF needs no protocol support;
- output goes through FIFOs read by two `cat`s, which forward what the command wrote however
  slowly the exec stream takes it. Once the command exits they are stopped when neither has moved
  (their read and write counts in /proc) for DRAIN seconds while the command's process group
  still has members (a `cmd &` that may hold stdout open, which must not hang the exec), or for
  SETTLE seconds when it has none (only a child that left the group could still hold it; a
  reader stalled that long is not waited for).

The exit status is the shell's: 128+N for a command killed by signal N.
"""

from __future__ import annotations

GATE_DIR = "/opt/pomona/gate"  # read-only in the sandbox: the static busybox
RUN_DIR = "/opt/pomona/run"  # tmpfs: one pid file and two FIFOs per running exec
BUSYBOX = f"{GATE_DIR}/busybox"
DRAIN = (
    "0.25"  # seconds without progress after which output held open by a background child is left
)
SETTLE = "5"  # the same when the command's group is empty

# $0 is the busybox path; then: exec id, uid to become ("": stay), cwd, stdin length ("-": none),
# command argv
EXEC = (
    r"""B=$0 R=__RUN__ id=$1 uid=$2 cwd=$3 nin=$4
shift 4
f=$R/x/$id
as=""; [ -z "$uid" ] || as="$B nsenter -F -S $uid -G $uid"
$B mkfifo -m 600 "$f.o" "$f.e" || exit 125
exec 3<&0
$B cat "$f.o" & o=$!
$B cat "$f.e" >&2 & e=$!
run() { exec $B setsid $as $B sh -c 'cd -- "$0" || exit 1; exec "$@"' "$cwd" "$@"; }
if [ "$nin" = - ]; then
  run "$@" </dev/null >"$f.o" 2>"$f.e" 3<&- &
else
  $B head -c "$nin" <&3 | run "$@" >"$f.o" 2>"$f.e" 3<&- &
fi
p=$!
echo "$p" > "$f"
wait "$p" 2>/dev/null
c=$?
( trap 'kill $! 2>/dev/null; exit' TERM
  d=__SETTLE__; $as $B kill -0 -"$p" 2>/dev/null && d=__DRAIN__
  l=; while n=$($B cat /proc/$o/io /proc/$e/io 2>/dev/null); [ "$n" != "$l" ]; do
    l=$n; $B sleep $d & wait $!; done; kill "$o" "$e" ) </dev/null >/dev/null 2>&1 &
w=$!
wait "$o" "$e" 2>/dev/null
kill "$w" 2>/dev/null
$B rm -f "$f" "$f.o" "$f.e"
exit "$c"
""".replace("__RUN__", RUN_DIR)
    .replace("__DRAIN__", DRAIN)
    .replace("__SETTLE__", SETTLE)
)

# $0 busybox, $1 exec id, $2 signal, $3 the command's uid ("": ours): signal the exec's process group (the pid
# itself if setsid had not run yet), as the command's own user (root holds no CAP_KILL). The
# caller believes the command runs: its pid file may be a moment late, so wait up to 5 s for it.
SIGNAL = r"""f=__RUN__/x/$1
i=0
while [ ! -s "$f" ] && [ $i -lt 50 ]; do $0 sleep 0.1; i=$((i + 1)); done
[ -s "$f" ] || exit 0
p=$($0 cat "$f") || exit 0
as=""; [ -z "$3" ] || as="$0 nsenter -F -S $3 -G $3"
exec $as $0 sh -c 'kill -"$0" -"$1" 2>/dev/null || kill -"$0" "$1" 2>/dev/null; exit 0' "$2" "$p"
""".replace("__RUN__", RUN_DIR)

# A terminal exec: the container runtime makes a tty exec its session's leader, so its pid is
# the group to signal. $0 busybox, then exec id, uid ("": stay), cwd, rows, cols, command argv.
PTY = r"""echo "$$" > __RUN__/x/$1
uid=$2 cwd=$3 rows=$4 cols=$5
shift 5
as=""; [ -z "$uid" ] || as="$0 nsenter -F -S $uid -G $uid"
exec $as $0 sh -c 'cd -- "$1" || exit 1; "$0" stty rows "$2" cols "$3" 2>/dev/null; shift 3; exec "$@"' $0 "$cwd" "$rows" "$cols" "$@"
""".replace("__RUN__", RUN_DIR)

# The sandbox container's command: make the run directory root-only, then idle as pid 1, reaping
# orphans (ash waits with waitpid(-1)) and leaving at once on SIGTERM.
IDLE = r"""$0 mkdir -p __RUN__/x && $0 chmod 700 __RUN__ __RUN__/x || exit 1
trap 'exit 0' TERM INT
while :; do $0 sleep 2147483647 & wait $!; done
""".replace("__RUN__", RUN_DIR)


# The gateway sidecar: 127.0.0.1:<port> inside the pod, forwarded to the one allowed address.
# busybox nc: -ll keeps listening, -e runs one forwarder per connection.
def forwarder(busybox: str, port: int, host: str, target_port: int) -> list[str]:
    return [busybox, "nc", "-ll", "-p", str(port), "-e", busybox, "nc", host, str(target_port)]


def _run(script: str, busybox: str, *args: str) -> list[str]:
    """busybox sh -c SCRIPT, with $0 the busybox path (the scripts call their applets through it)."""
    return [busybox, "sh", "-c", script, busybox, *args]


def _uid(uid: int | None) -> str:
    return "" if uid is None else str(uid)


def exec_argv(
    exec_id: str,
    uid: int | None,
    cwd: str,
    stdin_length: int | None,
    argv: list[str],
    busybox: str = BUSYBOX,
    script: str = EXEC,
) -> list[str]:
    """The argv an exec through the API server runs: the gate, then the command."""
    nin = "-" if stdin_length is None else str(stdin_length)
    return _run(script, busybox, exec_id, _uid(uid), cwd, nin, *argv)


def signal_argv(
    exec_id: str, signum: int, uid: int | None, busybox: str = BUSYBOX, script: str = SIGNAL
) -> list[str]:
    return _run(script, busybox, exec_id, str(signum), _uid(uid))


def pty_argv(
    exec_id: str,
    uid: int | None,
    cwd: str,
    rows: int,
    cols: int,
    argv: list[str],
    busybox: str = BUSYBOX,
    script: str = PTY,
) -> list[str]:
    return _run(script, busybox, exec_id, _uid(uid), cwd, str(rows), str(cols), *argv)


def idle_argv(busybox: str = BUSYBOX, script: str = IDLE) -> list[str]:
    return _run(script, busybox)
