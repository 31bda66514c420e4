"""The import rules of docs/architecture.md ("Layers"), checked over the source with ``ast``.

- no import circles among monitor's modules (imports under TYPE_CHECKING and inside functions
  count, as in ../shared/hooks/import_circles.py: a circle is a design question first);
- every package imports only from its own layer's package or from layers below it, and
  :data:`LAYERS` places every package and top-level module of monitor/ once (none missing, none
  stale);
- monitor/disclosure/ (pure math) imports no I/O module and calls no ``open``;
- one module talks to Dask (monitor/blocks/workers.py);
- no module in monitor/ is over 500 lines, except those named in :data:`LONG_MODULES` with why;
  none in bench/ either, except those named in :data:`LONG_BENCH_MODULES` with why;
- no function in monitor/ is over 60 lines (decorators excluded): a function fits a screen;
- no folder of monitor/ holds more than 15 % of its lines: one idea per folder, none swallowing
  the rest;
- no import circles among bench/ and scripts/ modules either (scripts import bench).

A new circle or a layer broken fails here, naming the modules.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "monitor"
BENCH = REPO / "bench"
SCRIPTS = REPO / "scripts"

#: Lowest first. A package (or top-level module) may import its own modules and those of lower
#: layers; two packages on one layer do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    (
        "vocabulary",
        "references",
        "jsonsafe",
        "printable",
        "numerals",
        "userfiles",
        "outputs",
        "blocks",
    ),
    ("disclosure",),
    ("logs",),
    ("audio",),
    ("wyoming",),
    ("features", "protect", "sources"),
    ("corpus",),
    ("calibration",),
    ("store", "scorefiles", "settings"),
    ("enrolment",),
    ("events", "population"),
    ("scoring", "load", "relay"),
    ("tracking", "ledger"),
    ("exporters",),
    ("evaluate", "daemon"),
    ("cli",),
)

#: What pure math must not import: files, sockets, processes, devices, terminals, clusters.
IO_MODULES = frozenset(
    {
        "asyncio",
        "socket",
        "ssl",
        "subprocess",
        "shutil",
        "tempfile",
        "io",
        "sqlite3",
        "csv",
        "json",
        "pathlib",
        "urllib",
        "http",
        "soundfile",
        "sounddevice",
        "soxr",
        "wyoming",
        "paho",
        "aiomqtt",
        "prometheus_client",
        "rich",
        "typer",
        "pyarrow",
        "dask",
        "distributed",
        "torch",
        "matplotlib",
        "logging.handlers",
    }
)

DASK_MODULES = frozenset({"dask", "distributed"})
THE_DASK_MODULE = "monitor.blocks.workers"

#: Modules over 500 lines, and why each is still one piece (none).
LONG_MODULES: dict[str, str] = {}
MAX_LINES = 500

#: bench/ modules over 500 lines, and why each is still one piece (none).
LONG_BENCH_MODULES: dict[str, str] = {}

#: The longest a function may be, in lines from ``def`` to its last line (decorators excluded).
MAX_FUNCTION_LINES = 60

#: The largest share of monitor/'s lines one folder may hold.
MAX_FOLDER_SHARE = 0.15


def module_files(root: Path) -> dict[str, Path]:
    """{dotted module name: file} of the package at ``root``."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> list[tuple[str, int]]:
    """Every absolute name ``module`` imports (anywhere in the file), with its line."""
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join(here + ([base] if base else []))
            names += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
            names.append((base, node.lineno))
    return names


def import_graph(root: Path, *others: Path) -> dict[str, set[str]]:
    """Module → modules of the package it imports (and of ``others``, drawn as one house). A
    package's ``__init__`` hands names on: importing through it is not an edge to it (as the
    shared hook counts)."""
    modules = module_files(root)
    for other in others:
        modules |= module_files(other)
    packages = {root.name} | {other.name for other in others}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for name, _ in imported_names(module, path):
            if name.split(".")[0] not in packages:
                continue
            target = resolve(name)
            if target is None or target == module or modules[target].name == "__init__.py":
                continue
            if is_package and target.startswith(module + "."):
                continue
            graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layer_of(module: str) -> tuple[int, str]:
    """(layer, package) of a module: its first name under ``monitor``."""
    parts = module.split(".")
    if len(parts) == 1:  # the package's own __init__
        return len(LAYERS), ""
    for layer, packages in enumerate(LAYERS):
        if parts[1] in packages:
            return layer, parts[1]
    raise AssertionError(f"{module}: its package {parts[1]!r} has no layer in LAYERS")


def layer_violations(root: Path) -> list[str]:
    """``a -> b`` for each import of a package on the same or a higher layer than its own."""
    problems = []
    for module, targets in sorted(import_graph(root).items()):
        layer, package = layer_of(module)
        for target in sorted(targets):
            other_layer, other = layer_of(target)
            if other != package and other_layer >= layer:
                problems.append(f"{module} -> {target}")
    return problems


def test_no_import_circles() -> None:
    assert circles(import_graph(ROOT)) == []


def test_no_import_circles_in_bench_and_scripts() -> None:
    assert circles(import_graph(BENCH, SCRIPTS)) == []


def test_every_package_imports_only_lower_layers() -> None:
    assert layer_violations(ROOT) == []


def top_level_names(root: Path) -> set[str]:
    """The packages and modules directly under ``root`` (what :data:`LAYERS` places)."""
    packages = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    return packages | modules


def test_layers_place_every_package_once() -> None:
    placed = [name for layer in LAYERS for name in layer]
    assert len(placed) == len(set(placed)), "a package placed on two layers"
    # a package moved or renamed leaves no stale name behind, and a new one is placed
    assert set(placed) == top_level_names(ROOT)


def test_disclosure_imports_no_io_and_opens_no_file() -> None:
    problems = []
    for module, path in module_files(ROOT).items():
        if not module.startswith("monitor.disclosure"):
            continue
        for name, line in imported_names(module, path):
            top = name.split(".")[0]
            if top in IO_MODULES or name in IO_MODULES:
                problems.append(f"{path.name}:{line}: imports {name}")
            if top == "monitor" and not name.startswith(("monitor.disclosure", "monitor.errors")):
                problems.append(f"{path.name}:{line}: imports {name}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                problems.append(f"{path.name}:{node.lineno}: calls open()")
    assert problems == []


def test_one_module_talks_to_dask() -> None:
    talking = {
        module
        for module, path in module_files(ROOT).items()
        for name, _ in imported_names(module, path)
        if name.split(".")[0] in DASK_MODULES
    }
    assert talking == {THE_DASK_MODULE}


def test_no_module_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT.parent)): n
        for path in ROOT.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert {name: n for name, n in long.items() if name not in LONG_MODULES} == {}


def test_no_bench_module_over_500_lines() -> None:
    long = {
        str(path.relative_to(REPO)): n
        for path in BENCH.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert {name: n for name, n in long.items() if name not in LONG_BENCH_MODULES} == {}


def long_functions(root: Path) -> dict[str, int]:
    """{``file:line name``: lines} of each function over :data:`MAX_FUNCTION_LINES`."""
    long = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
                    long[where] = lines
    return long


def test_no_function_over_60_lines() -> None:
    assert long_functions(ROOT) == {}


def folder_shares(root: Path) -> dict[str, float]:
    """{folder: its share of the package's lines} for each folder directly under ``root``."""
    lines: dict[str, int] = {}
    total = 0
    for path in root.rglob("*.py"):
        n = len(path.read_text().splitlines())
        total += n
        parts = path.relative_to(root).parts
        if len(parts) > 1:
            lines[parts[0]] = lines.get(parts[0], 0) + n
    return {folder: n / total for folder, n in lines.items()}


def test_no_folder_holds_over_15_percent_of_the_lines() -> None:
    shares = folder_shares(ROOT)
    assert {f: round(s, 3) for f, s in shares.items() if s > MAX_FOLDER_SHARE} == {}


# ---- the rules catch what they are for ------------------------------------------------------


@pytest.fixture
def copy_of_monitor(tmp_path: Path) -> Path:
    shutil.copytree(ROOT, tmp_path / "monitor", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "monitor"


def test_a_new_circle_is_found(copy_of_monitor: Path) -> None:
    # A function-level import back from the seam into a command closes a loop.
    workers = copy_of_monitor / "blocks" / "workers.py"
    workers.write_text(
        workers.read_text() + "\n\ndef _back():\n    from monitor.features.extract import x\n"
    )
    assert ["monitor.blocks.workers", "monitor.features.extract"] in circles(
        import_graph(copy_of_monitor)
    )


def test_a_long_function_is_found(copy_of_monitor: Path) -> None:
    errors = copy_of_monitor / "errors.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    errors.write_text(errors.read_text() + f"\n\ndef _long() -> None:\n{body}")
    found = long_functions(copy_of_monitor)
    assert [n for where, n in found.items() if where.startswith("monitor/errors.py:")] == [
        MAX_FUNCTION_LINES + 1
    ]


def test_a_layer_broken_is_found(copy_of_monitor: Path) -> None:
    ranks = copy_of_monitor / "disclosure" / "ranks.py"
    ranks.write_text(
        ranks.read_text() + "\n\nif False:\n    from monitor.calibration.fusion import x\n"
    )
    assert "monitor.disclosure.ranks -> monitor.calibration.fusion" in layer_violations(
        copy_of_monitor
    )
