"""The house rules for imports, checked where a change is written.

``lint-imports`` (run by CI next to ruff, contracts in pyproject.toml) checks that imports
run one way through the layers. These tests check what it cannot: that its layers name
every module of tfapp (a new module outside them would be unchecked), and that a function
imports a tfapp module only to put off loading TensorFlow (or another heavy library) until
it is needed -- never to dodge an import cycle -- and that no cycle runs through tfapp's
modules, imports inside functions included (``lint-imports`` sees those as well, but its
layers allow a cycle inside one layer, such as a task's own package). And that no module
of tfapp reaches another's private names, nor any test a private name of tfapp's, of
another test file's or of a library's (TensorFlow's, tf-keras's and KerasTuner's go
through tfapp.compat, whose own tests alone touch them).
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
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


def test_the_layers_contracts_name_every_module_of_tfapp_its_config_and_its_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    for container, folder in (("tfapp", PACKAGE), ("tfapp.config", PACKAGE / "config"),
                              ("tfapp.data", PACKAGE / "data")):
        (layers,) = [c for c in config["contracts"]
                     if c["type"] == "layers" and c["containers"] == [container]]
        named = {m.strip() for layer in layers["layers"] for part in layer.split("|")
                 for m in part.split(":")}
        modules = {p.stem if p.is_file() else p.name for p in folder.iterdir()
                   if (p.suffix == ".py" and p.stem != "__init__")
                   or (p.is_dir() and (p / "__init__.py").is_file())}
        assert named == modules, container


def _calls(path: Path) -> set[str]:
    """Names of the functions a module calls (``f(...)`` and ``anything.f(...)``)."""
    return {node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)}


def _input_calls(path: Path) -> set[str]:
    """The functions of tfapp/data/input/ a module calls, by the names it imports them
    under (``plan_steps(...)``, ``stream.batches(...)``)."""
    tree = ast.parse(path.read_text())
    functions, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "tfapp.data.input"):
            for a in node.names:
                is_module = _module_file(f"{node.module}.{a.name}")
                (modules if is_module else functions).add(a.asname or a.name)
    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(tree) if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id in functions)
                or (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in modules))}


def test_every_task_builds_its_batches_through_the_one_entry_point():
    # The chain from a split's files to model batches -- the step arithmetic (global
    # batch, steps per pass, resume point), length buckets, the stream, batches, finalize,
    # one pipeline per worker -- is put together in tfapp/data/input/reader.py only; a
    # task says what its examples are and calls training_inputs. A second copy drifts: the
    # step arithmetic once had four copies that disagreed, and the uncached maps were
    # parallel for one task only.
    chain = {"plan_steps", "grouping_for", "training_stream",
             "eval_stream", "service_stream", "batches", "finalize", "read_batches"}
    callers = {str(path.relative_to(PACKAGE)): _input_calls(path) & chain
               for path in PACKAGE.rglob("*.py") if _input_calls(path) & chain}
    assert callers == {"data/input/reader.py": {"plan_steps", "grouping_for", "batches",
                                                "finalize"}}, callers
    assert [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if "distribute_datasets_from_function" in _calls(p)] == ["data/input/reader.py"]
    tasks = sorted((PACKAGE / "tasks").glob("*/task.py"))
    assert len(tasks) == 4 and all("training_inputs" in _input_calls(p) for p in tasks)


#: libraries and helpers that parse a file format; user files are parsed in
#: tfapp/data/formats/ only (one reader per format), and these modules read or write files
#: tfapp itself wrote (prediction parts, run histories)
FORMAT_PARSERS = {"csv", "pyarrow.csv", "pyarrow.parquet", "tensorflow_datasets"}
FORMAT_CALLS = {"iter_lines", "csv_text_stream", "json_line", "open_source", "FromString"}
OWN_FILES = {"parts.py", "training/callbacks.py", "training/tb_logging.py",
             "tuning/results.py"}


def test_only_the_format_readers_parse_a_file_format():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel.startswith("data/formats/") or rel in OWN_FILES | {"textio.py"}:
            continue
        tree = ast.parse(path.read_text())
        imported = {name for _, name in _imports(tree, top_level=True)
                    + _imports(tree, top_level=False)}
        found += [f"{rel}: imports {m}" for m in sorted(imported & FORMAT_PARSERS)]
        found += [f"{rel}: calls {c}" for c in sorted(_calls(path) & FORMAT_CALLS)]
    assert found == [], found


def _private_reaches(source: str) -> list[str]:
    """``module._name`` and ``from tfapp.x import _name`` of tfapp modules in ``source``."""
    tree = ast.parse(source)
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names
                        if a.name.startswith("tfapp")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfapp"):
            for a in node.names:
                if a.name.startswith("_"):
                    found.append(f"from {node.module} import {a.name}")
                elif _module_file(f"{node.module}.{a.name}"):
                    modules.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):  # tfapp.tuning.distributed._Workers
                root = root.value
            if isinstance(root, ast.Name) and root.id in modules:
                found.append(f"{ast.unparse(node.value)}.{node.attr}")
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_reaches_another_modules_private_names():
    # A private name is its module's own: rows.py, arrow_rows.py and parquet_rows.py once
    # read CSV, Parquet and labels through sources._..., copies that drifted apart.
    found = [f"{path.relative_to(REPO)}: {reach}" for path in sorted(PACKAGE.rglob("*.py"))
             for reach in _private_reaches(path.read_text())]
    assert found == [], found


def test_the_private_reach_rule_sees_one():
    assert _private_reaches("from tfapp.data.rows import spec\nspec._clean(1)\n") == \
        ["spec._clean"]
    assert _private_reaches("from tfapp.data.rows.spec import _clean\n") == [
        "from tfapp.data.rows.spec import _clean"]
    assert _private_reaches("import tfapp.tuning.distributed\n"
                            "tfapp.tuning.distributed._Workers(1)\n") == [
        "tfapp.tuning.distributed._Workers"]
    assert _private_reaches("from tfapp.data.rows import spec\nspec.__doc__\n") == []


TESTS = REPO / "tests"
#: the internal modules of TensorFlow, tf-keras and KerasTuner (and Keras 3's)
LIBRARY_INTERNALS = ("tensorflow.python", "tf_keras.src", "keras_tuner.src", "keras.src")
#: underscore names that are documented public API (``os._exit``, a namedtuple's methods)
PUBLIC_UNDERSCORE = {"_exit", "_replace", "_asdict", "_fields", "_make"}
#: calls that name an attribute by a string: ``getattr(x, "_y")``,
#: ``monkeypatch.setattr(x, "_y", v)``, ``monkeypatch.setattr("pkg.mod._y", v)``
BY_NAME = {"getattr", "setattr", "hasattr", "delattr"}


def _internal_module(name: str) -> bool:
    return (any(name == m or name.startswith(m + ".") for m in LIBRARY_INTERNALS)
            or any(_is_private(part) for part in name.split(".")))


def _test_reaches(source: str) -> list[str]:
    """What a test file reaches of code that is not its own, besides tfapp's private module
    names (``_private_reaches``): an underscore attribute of anything but ``self`` / ``cls``
    (a tfapp object's, TensorFlow's...), an underscore name given as a string to
    ``getattr`` / ``setattr`` / ``monkeypatch.setattr``, ``from any_module import _name``
    (another test file's helper included), and the internal modules of TensorFlow, tf-keras
    and KerasTuner, imported or named to ``importlib.import_module``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _internal_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            if _internal_module(module):
                found.append(f"from {module} import ...")
            found += [f"from {module} import {a.name}" for a in node.names
                      if _is_private(a.name)]
        elif (isinstance(node, ast.Attribute) and _is_private(node.attr)
              and node.attr not in PUBLIC_UNDERSCORE
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{ast.unparse(node.value)}.{node.attr}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            strings = [a.value for a in node.args[:2]
                       if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name in BY_NAME:
                found += [f"{name}(..., {s!r})" for s in strings
                          if any(_is_private(part) for part in s.split("."))
                          and s.split(".")[-1] not in PUBLIC_UNDERSCORE]
            elif name == "import_module":
                found += [f"import_module({s!r})" for s in strings[:1] if _internal_module(s)]
    return found


def _code(path: Path) -> list[str]:
    """A test file's source, and the Python programs it holds as strings (what it runs in a
    fresh interpreter): strings of several lines that parse, f-strings and ``str.format``
    templates with their fields left out. This file's strings are the rules' own examples."""
    source = path.read_text()
    if path.name == Path(__file__).name:
        return [source]
    programs = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if "\n" not in text:
            continue
        for program in (textwrap.dedent(text), textwrap.dedent(re.sub(r"\{\w*\}", "", text))):
            try:
                ast.parse(program)
            except SyntaxError:
                continue
            programs.append(program)
            break
    return [source, *programs]


def test_no_test_reaches_a_private_name():
    # Tests use what a user or another module of tfapp can use: a helper a test needs is
    # public and documented, or the test goes through the command. TensorFlow's, tf-keras's
    # and KerasTuner's private names go through tfapp.compat, whose own tests
    # (tests/test_compat.py) are the one place that touches them.
    files = sorted(TESTS.rglob("*.py"))
    found = set()
    for path in files:
        for code in _code(path):
            reaches = _private_reaches(code)
            if path.name != "test_compat.py":
                reaches += _test_reaches(code)
            found |= {f"{path.relative_to(REPO)}: {reach}" for reach in reaches}
    assert len(files) > 70 and sorted(found) == [], sorted(found)


def test_the_test_rule_sees_each_kind_of_reach():
    source = textwrap.dedent("""
        import importlib
        from tensorflow.python.framework import config
        import tf_keras.src.engine.training as training
        from tensorflow.python.util import _pywrap_util_port
        from test_prepare import _rows, read_rows
        workers._last
        oracle._set_project_dir("x")
        model.optimizer._learning_rate
        super()._fit()
        monkeypatch.setattr(d, "_NONCE", "x")
        monkeypatch.setattr("tfapp.console._FILTER", "x")
        getattr(layer, "_trainable")
        importlib.import_module("keras_tuner.src.engine.trial")
    """)
    assert sorted(_test_reaches(source)) == sorted([
        "from tensorflow.python.framework import ...", "import tf_keras.src.engine.training",
        "from tensorflow.python.util import ...",
        "from tensorflow.python.util import _pywrap_util_port",
        "from test_prepare import _rows", "workers._last", "oracle._set_project_dir",
        "model.optimizer._learning_rate", "super()._fit",
        "setattr(..., '_NONCE')", "setattr(..., 'tfapp.console._FILTER')",
        "getattr(..., '_trainable')", "import_module('keras_tuner.src.engine.trial')"])
    public = textwrap.dedent("""
        from __future__ import annotations
        import tensorflow as tf
        self._count
        cls._made
        os._exit(0)
        row._replace(text="x")
        tf.__version__
        monkeypatch.setattr(parts.Output, "write", write)
        getattr(model, "__dict__")
    """)
    assert _test_reaches(public) == []


def test_the_test_rule_reads_the_programs_a_test_runs(tmp_path):
    test = tmp_path / "test_x.py"
    test.write_text('CODE = """\n{quiet}import tensorflow as tf\ntf.config._x = 1\n"""\n'
                    'def test_x(port):\n'
                    '    run(f"""\n    from tfapp.tuning import distributed as d\n'
                    '    d.configure(False, "7", "{port}")\n    print(d._NONCE)\n    """)\n')
    source, *programs = _code(test)
    assert _test_reaches(source) == [] and len(programs) == 2
    assert [_private_reaches(p) + _test_reaches(p) for p in programs] == [
        ["tf.config._x"], ["d._NONCE", "d._NONCE"]]
