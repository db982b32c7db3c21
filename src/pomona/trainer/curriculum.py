"""A small curriculum of file and shell tasks with held-out variants, for training a small model
online (examples/online_rl.py).

Six families (create a file with a word, rename, nested directories, count lines, replace a word,
copy), each instantiated with names and words from two disjoint pools: `train` variants draw from
one, `held_out` variants from the other, so a held-out task is a family the model trained on with
file names and words it never saw. Each task has a gold command (for the oracle episodes SFT
learns from) and a CommandScorer check, like the built-in `files` and `text` sets.
"""

from __future__ import annotations

from collections.abc import Callable

from pomona.benchmarks.task import CommandScorer, Environment, Task

BENCHMARK = "curriculum"
TRAIN_WORDS = ("apple", "river", "stone", "cloud")
HELD_OUT_WORDS = ("maple", "ocean", "ember")
LINES = {"apple": 4, "river": 7, "stone": 9, "cloud": 12, "maple": 5, "ocean": 8, "ember": 11}


def _create(w: str) -> Task:
    return Task(
        id=f"{BENCHMARK}/create-{w}",
        instruction=f"Create a file {w}.txt in the current directory containing exactly the word "
        f"{w}.",
        scorer=CommandScorer(f"cat {w}.txt", w),
        solution=(f"echo {w} > {w}.txt",),
        benchmark=BENCHMARK,
    )


def _rename(w: str) -> Task:
    return Task(
        id=f"{BENCHMARK}/rename-{w}",
        instruction=f"Rename {w}.csv to {w}_old.csv.",
        environment=Environment(files={f"{w}.csv": f"{w},1\n"}),
        scorer=CommandScorer(f"test ! -e {w}.csv && cat {w}_old.csv", f"{w},1"),
        solution=(f"mv {w}.csv {w}_old.csv",),
        benchmark=BENCHMARK,
    )


def _nested(w: str) -> Task:
    return Task(
        id=f"{BENCHMARK}/nested-{w}",
        instruction=f"Create the directory path {w}/data and put an empty file named marker "
        "inside data.",
        scorer=CommandScorer(f"test -f {w}/data/marker && echo ok", "ok"),
        solution=(f"mkdir -p {w}/data && touch {w}/data/marker",),
        benchmark=BENCHMARK,
    )


def _count(w: str) -> Task:
    n = LINES[w]
    return Task(
        id=f"{BENCHMARK}/count-{w}",
        instruction=f"Count the lines of {w}.txt and write just the number to count.txt.",
        environment=Environment(files={f"{w}.txt": "".join(f"{w}{i}\n" for i in range(n))}),
        scorer=CommandScorer("cat count.txt", str(n)),
        solution=(f"wc -l < {w}.txt > count.txt",),
        benchmark=BENCHMARK,
    )


def _replace(w: str) -> Task:
    return Task(
        id=f"{BENCHMARK}/replace-{w}",
        instruction=f"In notes.txt, replace every occurrence of {w} with done.",
        environment=Environment(files={"notes.txt": f"{w} first\nthen {w}\n"}),
        scorer=CommandScorer("cat notes.txt", "done first then done"),
        solution=(f"sed -i 's/{w}/done/g' notes.txt",),
        benchmark=BENCHMARK,
    )


def _copy(w: str) -> Task:
    return Task(
        id=f"{BENCHMARK}/copy-{w}",
        instruction=f"Copy {w}.md to backup.md.",
        environment=Environment(files={f"{w}.md": f"# {w}\n"}),
        scorer=CommandScorer(f"cat backup.md && cat {w}.md", f"# {w} # {w}"),
        solution=(f"cp {w}.md backup.md",),
        benchmark=BENCHMARK,
    )


FAMILIES: dict[str, Callable[[str], Task]] = {
    "create": _create,
    "rename": _rename,
    "nested": _nested,
    "count": _count,
    "replace": _replace,
    "copy": _copy,
}


def train(per_family: int = len(TRAIN_WORDS)) -> list[Task]:
    """The training variants: each family with the first `per_family` training words."""
    return [make(w) for w in TRAIN_WORDS[:per_family] for make in FAMILIES.values()]


def held_out(per_family: int = len(HELD_OUT_WORDS)) -> list[Task]:
    """The held-out variants: each family with words no training task uses."""
    return [make(w) for w in HELD_OUT_WORDS[:per_family] for make in FAMILIES.values()]
