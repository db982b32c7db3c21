"""Two small built-in task sets, `files` and `text`, with checkable outcomes and gold solutions.

They exercise the gym environments offline; the benchmark modules add the real sets.
"""

from __future__ import annotations

from pomona.benchmarks.task import CommandScorer, Environment, Task
from pomona.errors import Unknown

NAMES = "mallory\nalice\ndave\ncarol\nbob\n"
WORDS = "".join(f"word{i}\n" for i in range(37))

FILES = [
    Task(
        id="files/create-hello",
        instruction="Create a file hello.txt in the current directory "
        "containing exactly the word hello.",
        scorer=CommandScorer("cat hello.txt", "hello"),
        solution=("echo hello > hello.txt",),
        benchmark="files",
    ),
    Task(
        id="files/rename",
        instruction="Rename data.csv to data_old.csv.",
        environment=Environment(files={"data.csv": "a,b\n1,2\n"}),
        scorer=CommandScorer("test ! -e data.csv && cat data_old.csv", "a,b 1,2"),
        solution=("mv data.csv data_old.csv",),
        benchmark="files",
    ),
    Task(
        id="files/nested-dirs",
        instruction="Create the directory path a/b/c and put an empty file named marker inside c.",
        scorer=CommandScorer("test -f a/b/c/marker && echo ok", "ok"),
        solution=("mkdir -p a/b/c && touch a/b/c/marker",),
        benchmark="files",
    ),
]

TEXT = [
    Task(
        id="text/count-lines",
        instruction="Count the lines of words.txt and write just the number to count.txt.",
        environment=Environment(files={"words.txt": WORDS}),
        scorer=CommandScorer("cat count.txt", "37"),
        solution=("wc -l < words.txt > count.txt",),
        benchmark="text",
    ),
    Task(
        id="text/replace",
        instruction="In config.ini, replace every occurrence of foo with bar.",
        environment=Environment(files={"config.ini": "name=foo\npath=/foo/foo\n"}),
        scorer=CommandScorer("cat config.ini", "name=bar path=/bar/bar"),
        solution=("sed -i 's/foo/bar/g' config.ini",),
        benchmark="text",
    ),
    Task(
        id="text/sort-names",
        instruction="Write the names of names.txt, sorted alphabetically, "
        "one per line, to sorted.txt.",
        environment=Environment(files={"names.txt": NAMES}),
        scorer=CommandScorer("cat sorted.txt", "alice bob carol dave mallory"),
        solution=("sort names.txt > sorted.txt",),
        benchmark="text",
    ),
]

TASK_SETS: dict[str, list[Task]] = {"files": FILES, "text": TEXT}


def tasks(name: str = "all") -> list[Task]:
    if name == "all":
        return [t for ts in TASK_SETS.values() for t in ts]
    if name not in TASK_SETS:
        raise Unknown(f"no task set {name!r}; choose from {', '.join(TASK_SETS)} or 'all'")
    return list(TASK_SETS[name])


def get(task_id: str) -> Task:
    for task in tasks():
        if task.id == task_id:
            return task
    raise Unknown(f"no built-in task {task_id!r}")
