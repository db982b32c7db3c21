"""The harness contract: what Pomona must know to install, point, run and judge one agent harness.

A harness module declares one `Harness` subclass instance. Everything that differs between
harnesses (package, config files, command line, transcript, final answer) is a field or a method
here; everything that is the same (installing, running, collecting, judging failures) lives in
payload.py and run.py, so adding a harness is one module.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pomona.errors import UsageError
from pomona.harnesses.mcp import McpServer

Dialect = Literal["chat", "responses", "anthropic"]
TOOLS_MOUNT = "/opt/pomona/tools"
API_KEY = "sk-pomona"  # the proxy ignores it; some harnesses refuse to start without one
# the `api` names of pi-ai, the model library under both pi and OpenClaw
PI_AI_API: dict[str, str] = {
    "chat": "openai-completions",
    "responses": "openai-responses",
    "anthropic": "anthropic-messages",
}


# --- how a harness gets into the payload ------------------------------------------------------


@dataclass(frozen=True)
class NpmInstall:
    """An npm package, installed with the payload's own Node 24 (Node 20's npm resolves older
    versions, or placeholders, for packages whose `engines` need a newer Node)."""

    package: str
    version: str
    bin: str  # the package.json "bin" entry to expose
    native: str | None = (
        None  # a file that must be an ELF once postinstall ran (relative to the package)
    )


@dataclass(frozen=True)
class PypiInstall:
    """Python requirements, installed into a private copy of CPython that the payload carries,
    so the harness never sees (or needs) the image's Python."""

    requirements: tuple[str, ...]
    script: str  # the console script to expose; "": the interpreter itself (Pomona's own programs)
    python: tuple[int, int] = (3, 11)  # the oldest CPython it runs on
    distribution: str = ""  # whose version to verify; default: the first requirement's name


@dataclass(frozen=True)
class BinaryInstall:
    """A prebuilt binary the user supplies (a path or URL): for harnesses no reachable registry has."""

    binary: str
    source_env: str  # the environment variable naming the path or URL
    why: str


Install = NpmInstall | PypiInstall | BinaryInstall


# --- one run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunContext:
    """Everything a harness needs to build its config and command for one episode."""

    prompt: str
    model: str
    base_url: str  # the episode's OpenAI base URL, with /v1, as seen from inside the sandbox
    anthropic_base_url: str  # the same without /v1, for Anthropic SDK clients
    dialect: Dialect
    workdir: str
    run_dir: str  # a fresh directory in the sandbox for config, state and transcripts
    timeout: float
    mcp: tuple[McpServer, ...] = ()  # MCP servers to give the harness through its own config

    @property
    def home(self) -> str:
        return f"{self.run_dir}/home"


@dataclass
class Launch:
    """Config files to write (absolute sandbox paths), environment, and the argv to run."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)  # directories that must exist beforehand

    def shell(self) -> str:
        return shlex.join(self.argv)


@dataclass
class Outputs:
    """What a finished run left behind: its output streams and its own transcript files."""

    stdout: str
    stderr: str
    exit_code: int
    files: dict[str, bytes]  # transcript files, by path relative to the run directory

    def json_lines(self, text: str | None = None) -> list[dict[str, Any]]:
        """The JSON objects among the lines of stdout (or `text`), skipping anything else."""
        out = []
        for line in (self.stdout if text is None else text).splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    out.append(value)
        return out

    def file_lines(self, suffix: str) -> list[dict[str, Any]]:
        """JSON lines of every collected transcript file whose name ends with `suffix`."""
        records: list[dict[str, Any]] = []
        for name in sorted(self.files):
            if name.endswith(suffix):
                records += self.json_lines(self.files[name].decode("utf-8", "replace"))
        return records

    def sqlite_rows(self, suffix: str, query: str) -> list[dict[str, Any]]:
        """Rows of `query` on the collected SQLite file ending with `suffix` (harnesses that keep
        their transcript in a database); [] when there is none or it cannot be read."""
        import sqlite3
        import tempfile

        name = next((n for n in sorted(self.files) if n.endswith(suffix)), None)
        if name is None:
            return []
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/db.sqlite"
            with open(path, "wb") as f:
                f.write(self.files[name])
            for extra in ("-wal", "-shm"):
                if name + extra in self.files:
                    with open(path + extra, "wb") as f:
                        f.write(self.files[name + extra])
            try:
                con = sqlite3.connect(path)
                con.row_factory = sqlite3.Row
                rows = [dict(r) for r in con.execute(query)]
                con.close()
                return rows
            except sqlite3.Error:
                return []


class Harness:
    """One agent harness. Subclasses set the class fields and implement `launch`, `final_answer`
    and `completed`; the defaults cover the rest."""

    name: ClassVar[str]
    version: ClassVar[str]
    dialects: ClassVar[tuple[Dialect, ...]]  # the first is the default
    install: ClassVar[Install]
    command: ClassVar[str]  # the wrapper name in the payload's bin/
    transcript_globs: ClassVar[tuple[str, ...]] = ()  # relative to the run directory
    submit_command: ClassVar[str | None] = None  # a command-protocol harness's "I am done"
    takes_mcp: ClassVar[bool] = False  # launch() renders ctx.mcp into the harness's own config
    # False: a benchmark's own loop, whose program its tasks lay out (claw-eval): it plays only
    # those tasks, so the file task of `pomona harnesses check` is not its check
    standalone: ClassVar[bool] = True

    def launch(self, ctx: RunContext) -> Launch:
        raise NotImplementedError

    def final_answer(self, out: Outputs) -> str | None:
        """The harness's last message to the user, read from its own output or transcript."""
        raise NotImplementedError

    def completed(self, out: Outputs) -> bool:
        """Whether the harness itself says it finished its turn (exit codes lie: pi exits 0 on an
        unparseable stream, Codex "completes" turns whose command failed)."""
        return bool(self.final_answer(out))

    def transcript(self, out: Outputs) -> list[dict[str, Any]]:
        """The harness's own record of the conversation, as JSON-able records."""
        return [r for g in self.transcript_globs for r in out.file_lines(g.rsplit("*", 1)[-1])]

    def scripted(self, script: list[str]) -> list[str]:
        """The scripted model's commands for this harness: a command-protocol harness also needs
        its submit command at the end."""
        return [*script, self.submit_command] if self.submit_command else list(script)

    def check_dialect(self, dialect: str | None) -> Dialect:
        chosen = dialect or self.dialects[0]
        if chosen not in self.dialects:
            raise UsageError(f"{self.name} speaks {', '.join(self.dialects)}, not {chosen!r}")
        return chosen

    def __repr__(self) -> str:
        return f"<Harness {self.name} {self.version}>"


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"


def last_text(records: list[dict[str, Any]], *path: str) -> str | None:
    """The last non-empty string found at `path` (keys) among `records`."""
    found = None
    for r in records:
        value: Any = r
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str) and value.strip():
            found = value
    return found


def assistant_text(message: Any) -> str | None:
    """The text of an assistant message whose content is a string or a list of text parts
    (the shape every harness's own message log uses, whatever its wire dialect)."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content.strip() or None
    parts = [
        p.get("text")
        for p in content or []
        if isinstance(p, dict) and p.get("type") in ("text", "output_text")
    ]
    text = "".join(p for p in parts if isinstance(p, str)).strip()
    return text or None
