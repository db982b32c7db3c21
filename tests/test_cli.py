"""The `pomona` command line starts light: importing it, `pomona --help` and the subcommands that
need none of them import no numpy, torch, playwright, litellm or transformers (each checked in a
fresh interpreter's sys.modules), while every subcommand is still listed with its own help line
and `import pomona` still registers the Gymnasium environments once gymnasium is imported."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pomona.cli import COMMANDS, build_parser

HEAVY = ("numpy", "torch", "playwright", "litellm", "transformers")
LIGHT_COMMANDS = ("demo", "serve", "proxy", "harnesses", "tasks", "run", "leaderboard", "grade",
                  "images", "browser", "deploy", "gc")  # fmt: skip
"""The subcommands whose own work needs none of HEAVY (`view`, `export`, `train` read Arrow)."""


def modules_after(code: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after running `code`."""
    report = "import json, sys; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    done = subprocess.run([sys.executable, "-c", f"{code}\n{report}"], capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    return set(json.loads(done.stdout.splitlines()[-1]))


def help_of(*argv: str) -> str:
    return (
        f"from pomona.cli import main\ntry:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass"
    )


@pytest.mark.parametrize(
    "code",
    ["import pomona.cli", help_of("--help"), *(help_of(name, "--help") for name in LIGHT_COMMANDS)],
    ids=["import", "--help", *LIGHT_COMMANDS],
)
def test_start_up_imports_nothing_heavy(code: str) -> None:
    assert modules_after(code).isdisjoint(HEAVY)


def test_every_subcommand_is_listed_with_the_help_it_registers() -> None:
    def listed(parser) -> dict[str, str]:
        (sub,) = [a for a in parser._actions if a.dest == "command"]
        return {choice.dest: choice.help for choice in sub._choices_actions}

    assert listed(build_parser()) == {name: c.help for name, c in COMMANDS.items()}
    assert listed(build_parser(*COMMANDS)) == listed(build_parser())  # the modules' own lines


def test_a_subcommand_runs_and_a_typo_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from pomona.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["deploy", "render", "--help"])
    assert exited.value.code == 0 and "--values" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["serv"])
    assert exited.value.code == 2 and "invalid choice: 'serv'" in capsys.readouterr().err


def test_importing_pomona_still_registers_the_envs_when_gymnasium_comes() -> None:
    check = "import gymnasium\nassert 'pomona/ShellEnv-v0' in gymnasium.registry"
    assert "numpy" not in modules_after("import pomona")
    modules_after(f"import pomona\n{check}")  # gymnasium after pomona
    modules_after(f"import gymnasium\nimport pomona\n{check}")  # or before it
