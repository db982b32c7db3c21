"""The package's shape, checked from its source with `ast`: the layers import only downward, no
module imports itself round a circle, and no function or class outgrows what one person holds in
mind.

    python -m tests.structure [SRC]    # what ./dev lint runs; exits 1 and says where, if not

Layers, bottom-up (a package may import its own layer or any below it):

    errors                             the one error tree
    keys, progress                     small helpers every layer may use
    orchestrator                       sandboxes: runtimes, service, SDK
    trajectories                       the Arrow store
    proxy                              the recording proxy
    harnesses                          agent CLIs
    browser_env                        Chromium in a sandbox
    benchmarks                         tasks, stages, scorers
    episodes                           the episode engine
    trainer                            samples, exports, training
    gym, viewer                        Gymnasium environments; the trajectory viewer
    run, resume, slurm, demo, deploy,  the command line and the package's front door
    doctor, cli,
    pomona

Every import counts, wherever it stands (a function-level import still ties two modules); a name
used only for type hints, under `if TYPE_CHECKING:`, counts too.
"""

from __future__ import annotations

import ast
import builtins
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
SKIP = ("pomona/benchmarks/data/",)  # task data: repositories an agent is given, not Pomona
LAYERS = {
    "errors": -1,
    **dict.fromkeys(("keys", "progress"), 0),
    "orchestrator": 1,
    "trajectories": 2,
    "proxy": 3,
    "harnesses": 4,
    "browser_env": 5,
    "benchmarks": 6,
    "episodes": 7,
    "trainer": 8,
    **dict.fromkeys(("gym", "viewer"), 9),
    **dict.fromkeys(
        ("run", "resume", "slurm", "demo", "deploy", "doctor", "run_cli", "cli", ""), 10
    ),
}


@dataclass(frozen=True)
class Module:
    name: str  # pomona.x.y
    path: Path
    where: Path  # the path under the source root, as problems are reported

    @property
    def package(self) -> str:
        """The top-level part under pomona ('' for the package's own __init__)."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else ""

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def modules(root: Path = ROOT) -> dict[str, Module]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(str(rel).startswith(s) for s in SKIP):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = Module(".".join(parts), path, rel)
    return found


def _imported(
    module: Module, node: ast.Import | ast.ImportFrom, known: dict[str, Module]
) -> set[str]:
    """The modules of ours an import statement loads (a submodule named by `from X import sub`
    is that submodule, not X's __init__)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
        if node.level:
            base = base[: len(base) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
        names = subs + ([target] if len(subs) < len(node.names) else [])
    out = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module.name and name.startswith("pomona"):
            out.add(name)
    return out


def import_graph(known: dict[str, Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module in known.values():
        for node in ast.walk(ast.parse(module.path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[module.name] |= _imported(module, node, known)
    return graph


def upward_imports(known: dict[str, Module], graph: dict[str, set[str]]) -> list[str]:
    """Imports from a layer to a higher one, or across two packages of one layer (but the
    command line's)."""
    found = []
    for a, targets in sorted(graph.items()):
        pa = known[a].package
        for b in sorted(targets):
            pb = known[b].package
            top = LAYERS[pa] == max(LAYERS.values())  # the command line may use its siblings
            if pa != pb and (LAYERS[pb] > LAYERS[pa] or (LAYERS[pb] == LAYERS[pa] and not top)):
                found.append(f"{a} -> {b} (layer {pa or 'pomona'} -> {pb or 'pomona'})")
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


# raising these is the language's protocol, not an error a user meets: allowed anywhere
PROTOCOL_RAISES = {"AssertionError", "NotImplementedError", "StopIteration", "StopAsyncIteration",
                   "SystemExit", "KeyboardInterrupt", "GeneratorExit"}  # fmt: skip
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
} - PROTOCOL_RAISES
# code that runs inside a sandbox as a program of its own, and the test doubles that stand in for
# a network (their refused or reset connections are what a real one raises): not the library
NOT_LIBRARY = ("/sandbox/", "/proxy/testing/", "/runtimes/memory.py")
VALIDATORS = ("field_validator", "model_validator", "validator")  # pydantic turns these into 422s


def _raised(node: ast.Raise | ast.Return) -> str | None:
    """The builtin a `raise` raises, or a `return` builds (a factory of errors for its callers
    to raise: `raise self.fail(...)`)."""
    if isinstance(node, ast.Return):
        made = node.value
        return (
            made.func.id if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) else None
        )
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


def _exempt(function: ast.FunctionDef | ast.AsyncFunctionDef | None, name: str) -> bool:
    if function is None:
        return False
    if name == "AttributeError" and function.name == "__getattr__":
        return True
    decorators = [d.func if isinstance(d, ast.Call) else d for d in function.decorator_list]
    named = {d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "") for d in decorators}
    return bool(named & set(VALIDATORS))


def bare_raises(known: dict[str, Module]) -> Iterator[str]:
    """`raise ValueError(...)` and the like in library code, or `return ValueError(...)` for a
    caller to raise: what users meet must derive from pomona.errors.PomonaError, so
    `except PomonaError` catches it."""
    for module in known.values():
        if any(part in f"/{module.where}" for part in NOT_LIBRARY):
            continue
        tree = ast.parse(module.path.read_text())
        found: list[tuple[int, str]] = []
        stack: list[tuple[ast.AST, ast.FunctionDef | ast.AsyncFunctionDef | None]] = [(tree, None)]
        while stack:
            node, function = stack.pop()
            for child in ast.iter_child_nodes(node):
                inner = (
                    child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
                )
                if isinstance(child, ast.Raise | ast.Return):
                    name = _raised(child)
                    if name in BUILTIN_ERRORS and not _exempt(function, name):
                        verb = "raises" if isinstance(child, ast.Raise) else "returns"
                        found.append((child.lineno, f"{verb} {name}, not a PomonaError"))
                stack.append((child, inner))
        for line, what in sorted(found):  # in the file's order
            yield f"{module.where}:{line} {what}"


MAX_FUNCTION, MAX_CLASS = 80, 500  # lines, decorators and docstrings included


def oversized(known: dict[str, Module]) -> Iterator[str]:
    """Functions over MAX_FUNCTION lines and classes over MAX_CLASS: past what one person holds
    in mind, so split at a seam."""
    for module in known.values():
        for node in ast.walk(ast.parse(module.path.read_text())):
            limit = {ast.FunctionDef: MAX_FUNCTION, ast.AsyncFunctionDef: MAX_FUNCTION,
                     ast.ClassDef: MAX_CLASS}.get(type(node))  # fmt: skip
            if limit is None:
                continue
            assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - start + 1
            if length > limit:
                yield f"{module.where}:{start} {node.name} is {length} lines (> {limit})"


def problems(root: Path = ROOT) -> Iterator[str]:
    known = modules(root)
    unplaced = sorted({m.package for m in known.values()} - set(LAYERS))
    for package in unplaced:
        yield f"pomona.{package} is in no layer: place it in LAYERS (tests/structure.py)"
    if unplaced:
        return
    graph = import_graph(known)
    for line in upward_imports(known, graph):
        yield f"import runs up the layers: {line}"
    for circle in circles(graph):
        yield f"import circle: {' -> '.join(circle)}"
    for line in oversized(known):
        yield f"too long: {line}"
    yield from bare_raises(known)


def main(argv: list[str]) -> int:
    """Print every problem of the source tree (argv[0], else Pomona's); 1 if there is any."""
    found = list(problems(Path(argv[0]) if argv else ROOT))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
