"""The house rules for imports, checked where a change is written.

``lint-imports`` (run by CI next to ruff, contracts in pyproject.toml) checks that imports
run one way through the layers. These tests check what it cannot: that its layers name
every module of tfapp (a new module outside them would be unchecked), and that a function
imports a tfapp module only to put off loading TensorFlow (or another heavy library) until
it is needed -- never to dodge an import cycle -- and that no cycle runs through tfapp's
modules, imports inside functions included (``lint-imports`` sees those as well, but its
layers allow a cycle inside one layer, such as a task's own package).
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "tfapp"
#: libraries worth loading only when needed (``--help`` and config errors stay fast)
HEAVY = {"tensorflow", "tf_keras", "keras_tuner", "tensorflow_text", "tensorflow_hub",
         "tensorflow_datasets", "wandb", "matplotlib", "grpc", "apache_beam"}


def _module_file(name: str) -> Path | None:
    path = REPO / Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(tree: ast.AST, *, top_level: bool) -> list[tuple[int, str]]:
    """(line, module) of every import at the top level (``top_level``), or inside a function
    (not); ``from a import b`` gives ``a.b`` when that is a module, else ``a``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if (isinstance(child, ast.If) and isinstance(child.test, ast.Name)
                    and child.test.id == "TYPE_CHECKING"):
                continue  # for type checkers only: never imported at run time
            if isinstance(child, ast.Import | ast.ImportFrom):
                if in_function == top_level:
                    continue
                if isinstance(child, ast.Import):
                    found.extend((child.lineno, a.name) for a in child.names)
                elif child.module and not child.level:
                    for a in child.names:
                        sub = f"{child.module}.{a.name}"
                        found.append((child.lineno, sub if _module_file(sub) else child.module))
                continue
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, False)
    return found


@functools.cache
def _top_level_imports(module: str) -> tuple[str, ...]:
    path = _module_file(module)
    if path is None:
        return ()
    return tuple(name for _, name in _imports(ast.parse(path.read_text()), top_level=True))


def _loads_heavy(module: str, seen: set[str] | None = None) -> bool:
    """Whether importing ``module`` loads a heavy library, through top-level imports only."""
    seen = set() if seen is None else seen
    if module in seen:
        return False
    seen.add(module)
    parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
    for name in _top_level_imports(module):
        if name.split(".")[0] in HEAVY:
            return True
        if name.startswith("tfapp") and _loads_heavy(name, seen):
            return True
    return any(_loads_heavy(p, seen) for p in parents)


def test_function_level_imports_of_tfapp_only_put_off_heavy_libraries():
    dodges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, name in _imports(ast.parse(path.read_text()), top_level=False):
            if name.startswith("tfapp") and not _loads_heavy(name):
                dodges.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert dodges == [], ("these imports inside functions load nothing heavy: import at the "
                          "top of the module (a cycle means a layer is wrong; see "
                          f"docs/architecture.md): {dodges}")


def test_the_rule_sees_a_cycle_dodge(tmp_path):
    tree = ast.parse("def f():\n    from tfapp.errors import ConfigError\n"
                     "    from tfapp.training.driver import train\n")
    inner = _imports(tree, top_level=False)
    assert inner == [(2, "tfapp.errors"), (3, "tfapp.training.driver")]
    assert [_loads_heavy(name) for _, name in inner] == [False, True]


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the tfapp modules it imports anywhere (top level or in a function; not
    under ``TYPE_CHECKING``), for ``sources`` (module name -> its source)."""
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        tree = ast.parse(source)
        names = _imports(tree, top_level=True) + _imports(tree, top_level=False)
        graph[module] = {name for _, name in names
                         if name.startswith("tfapp") and name != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (its modules, first repeated last) per strongly connected group of
    modules (Tarjan's algorithm), each found by a walk inside its group."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles = []
    for group in groups:
        start = min(group)
        path, node = [start], start
        while True:  # every member has an edge inside its group; follow one until it closes
            node = min(n for n in graph[node] if n in group and n not in path[1:])
            if node in path:
                cycles.append(path[path.index(node):] + [node])
                break
            path.append(node)
    return cycles


def test_no_import_cycle_among_tfapp_modules_imports_in_functions_included():
    sources = {_module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}
    graph = _import_graph(sources)
    assert len(graph) > 100 and "tfapp.tasks.ner.serving" in graph["tfapp.tasks.ner.export"]
    assert _cycles(graph) == [], ("import cycles (an import inside a function included; "
                                  "move the shared part down a layer, see "
                                  "docs/architecture.md)")


def test_the_cycle_check_sees_a_cycle_hidden_in_a_function():
    # The cycle tasks/ner/export.py <-> serving.py had: serving imported export inside a
    # method, export imported serving at its top.
    sources = {"tfapp.tasks.ner.export": "from tfapp.tasks.ner.serving import FORMAT\n",
               "tfapp.tasks.ner.serving": "from tfapp.serving import ExportFormat\n"
                                          "class T:\n    def entities(self):\n"
                                          "        from tfapp.tasks.ner.export import "
                                          "entities\n",
               "tfapp.serving": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from tfapp.tasks.ner.export import NerServing\n"}
    graph = _import_graph(sources)
    assert _cycles(graph) == [["tfapp.tasks.ner.export", "tfapp.tasks.ner.serving",
                               "tfapp.tasks.ner.export"]]
    del sources["tfapp.tasks.ner.serving"]  # without the function-level import: none
    sources["tfapp.tasks.ner.serving"] = "from tfapp.serving import ExportFormat\n"
    assert _cycles(_import_graph(sources)) == []


def test_the_layers_contracts_name_every_module_of_tfapp_and_of_its_config():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    for container, folder in (("tfapp", PACKAGE), ("tfapp.config", PACKAGE / "config")):
        (layers,) = [c for c in config["contracts"]
                     if c["type"] == "layers" and c["containers"] == [container]]
        named = {m.strip() for layer in layers["layers"] for part in layer.split("|")
                 for m in part.split(":")}
        modules = {p.stem if p.is_file() else p.name for p in folder.iterdir()
                   if (p.suffix == ".py" and p.stem != "__init__")
                   or (p.is_dir() and (p / "__init__.py").is_file())}
        assert named == modules, container



def test_every_task_takes_its_step_arithmetic_from_the_one_reader():
    # Global batch, examples per step, steps per pass and the resume point are worked out
    # once, in tfapp.data.stream.plan_steps; a task that recomputes them drifts from the
    # stream that cuts its batches (the four copies once disagreed).
    tasks = sorted((REPO / "tfapp" / "tasks").glob("*/task.py"))
    assert len(tasks) == 4
    for path in tasks:
        calls = {node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call)
                 and isinstance(node.func, (ast.Attribute, ast.Name))}
        assert "plan_steps" in calls, path
        assert not calls & {"steps_per_pass", "start_at", "ceil"}, (path, calls)


def test_every_task_builds_its_batches_through_the_one_reader():
    # The chain from a split's files to model batches (stream, batches, finalize) is
    # built in tfapp/data/reader.py only; the tasks' data modules describe their examples
    # and call read_batches. A second copy of the chain drifts (the uncached maps were
    # once parallel for one task and serial for the others).
    chain = {"training_stream", "batches", "finalize", "service_stream", "eval_stream"}
    callers: dict[str, set[str]] = {}
    for path in (REPO / "tfapp").rglob("*.py"):
        # Calls of tfapp's data modules by their import names (stream.batches, ...).
        called = {node.func.attr for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name)
                  and node.func.value.id in {"stream", "stages", "pipeline", "reader"}}
        rel = str(path.relative_to(REPO / "tfapp"))
        if called & {"training_stream", "batches", "finalize"}:
            callers[rel] = called & chain
        if "read_batches" in called:
            callers.setdefault(rel, set()).add("read_batches")
    assert callers.pop("data/reader.py") >= {"batches", "finalize"}
    assert callers == {"data/classification.py": {"read_batches"},
                       "data/token_classification.py": {"read_batches"},
                       "data/text_lines.py": {"read_batches"},
                       "tasks/mlm/task.py": {"read_batches"}}, callers
