"""The stage rule and the import graph, checked from `ast` alone (no import runs, so nothing can hide
behind a failing import):

- the four stages (ingest, serving, pipelines, trainer) never import each other, nor demo/ or infra/;
- liverl/ (the contracts and the shared libraries) imports no stage, nor demo/ or infra/;
- no import cycle among the project's modules;
- no class name defined twice across liverl/, the stages, demo/ and infra/ (top-level classes): one concept, one
  class; two concepts, two names that tell them apart.

Every import counts wherever it stands (module level, inside a function, under `if TYPE_CHECKING:`), since
each is a dependency someone will follow. tests/ and bench/ may import anything and are not scanned;
`importlib.import_module` with a string (liverl/cli.py's dispatch) is not an import edge.
See docs/architecture.md, "The stage rule".
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("ingest", "serving", "pipelines", "trainer")
OUTSIDE_THE_STAGES = ("demo", "infra")
NOT_SCANNED = {"tests", "bench"}
GENERATED = "liverl/v1"  # protobuf modules: they import each other by design (scripts/gen_proto.py)


def project_modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package) for every .py file below root outside tests/, bench/,
    hidden folders and virtual environments."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_SCANNED or any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if rel.as_posix().startswith(GENERATED) and "_pb2" in rel.name:
            continue
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = (path, is_package)
    return modules


def _project_target(name: str, modules: dict) -> str | None:
    """The longest prefix of a dotted name that is a project module (None: a third-party import)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def imports_of(module: str, tree: ast.AST, is_package: bool, modules: dict) -> set[str]:
    """The project modules `module` imports, absolute and relative."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {t for alias in node.names if (t := _project_target(alias.name, modules))}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                target = full if full in modules else _project_target(base, modules) if base else None
                if target:
                    found.add(target)
    found.discard(module)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = project_modules(root)
    return {name: imports_of(name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), is_package,
                             modules)
            for name, (path, is_package) in modules.items()}


def rule_breaks(graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks the stage rule, as "importer -> imported (why)"."""
    breaks = []
    for importer, imported in sorted(graph.items()):
        top = importer.split(".")[0]
        for target in sorted(imported):
            target_top = target.split(".")[0]
            if top in STAGES and target_top != top and target_top in STAGES + OUTSIDE_THE_STAGES:
                breaks.append(f"{importer} -> {target} (a stage imports another stage, demo or infra)")
            elif top == "liverl" and target_top in STAGES + OUTSIDE_THE_STAGES:
                breaks.append(f"{importer} -> {target} (liverl/ is shared by the stages and imports none of them)")
    return breaks


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
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


def class_definitions(root: Path) -> dict[str, list[str]]:
    """Top-level class name -> the modules that define it, in liverl/, the stages, demo/ and infra/ (tests/,
    bench/ and the generated protobuf modules are not scanned)."""
    scanned = ("liverl",) + STAGES + OUTSIDE_THE_STAGES
    defined: dict[str, list[str]] = {}
    for name, (path, _) in project_modules(root).items():
        if name.split(".")[0] not in scanned:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(name)
    return defined


def classes_defined_twice(defined: dict[str, list[str]]) -> list[str]:
    """Every class name defined in more than one module, as "Name: module, module"."""
    return [f"{name}: {', '.join(sorted(modules))}" for name, modules in sorted(defined.items()) if len(modules) > 1]


def test_the_stages_meet_only_in_liverl():
    breaks = rule_breaks(import_graph(ROOT))
    assert not breaks, ("imports that break the stage rule; move what both sides need into liverl/ (contracts "
                        "or a shared library) and import it from there:\n" + "\n".join(breaks))


def test_the_project_has_no_import_cycle():
    found = cycles(import_graph(ROOT))
    assert not found, "import cycles; break each by moving what both sides need into a module of its own:\n" + \
        "\n".join(" -> ".join(cycle) for cycle in found)


def test_no_class_name_is_defined_twice():
    twice = classes_defined_twice(class_definitions(ROOT))
    assert not twice, ("class names defined in more than one module: one concept is one class (a variant is a "
                       "parameter or a subclass of it, docs/architecture.md); two concepts get names that tell them "
                       "apart:\n" + "\n".join(twice))


def test_the_scan_sees_every_stage_and_the_shared_library():
    graph = import_graph(ROOT)
    assert {name.split(".")[0] for name in graph} >= set(STAGES) | {"liverl", "demo", "infra"}
    assert "liverl.access.token_bucket" in graph["ingest.admission"]  # the scan follows real edges


# The checker itself, on planted trees: each rule must be able to fail.

def plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in {p.parent for p in root.rglob("*.py")}:
        (package / "__init__.py").touch()
    return root


@pytest.mark.parametrize("files, expected", [
    ({"serving/api.py": "from ingest.auth import TokenAuth\n", "ingest/auth.py": ""},
     "serving.api -> ingest.auth (a stage imports another stage"),
    ({"trainer/loop.py": "def later():\n    import pipelines.table\n", "pipelines/table.py": ""},
     "trainer.loop -> pipelines.table"),
    ({"pipelines/run.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from demo import config\n",
      "demo/config.py": ""}, "pipelines.run -> demo.config"),
    ({"ingest/stack.py": "from infra.embedded import up\n", "infra/embedded.py": ""}, "ingest.stack -> infra.embedded"),
    ({"liverl/io/util.py": "from ..config import x\nfrom serving import lease\n", "serving/lease.py": "",
      "liverl/config.py": ""}, "liverl.io.util -> serving.lease (liverl/ is shared"),
])
def test_a_planted_rule_break_is_found(tmp_path, files, expected):
    breaks = rule_breaks(import_graph(plant(tmp_path, files)))
    assert any(b.startswith(expected) for b in breaks), breaks


def test_a_planted_cycle_is_found_and_relative_imports_count(tmp_path):
    graph = import_graph(plant(tmp_path, {
        "liverl/io/a.py": "from . import b\n",
        "liverl/io/b.py": "from liverl.io.c import thing\n",
        "liverl/io/c.py": "def f():\n    from ..io import a\n",
        "liverl/io/d.py": "import liverl.io.a\n",
    }))
    assert cycles(graph) == [["liverl.io.a", "liverl.io.b", "liverl.io.c"]]


def test_a_planted_duplicate_class_is_found_and_tests_and_nested_classes_are_not(tmp_path):
    defined = class_definitions(plant(tmp_path, {
        "ingest/validation.py": "class Limits:\n    pass\n",
        "serving/generation.py": "from dataclasses import dataclass\n@dataclass\nclass Limits:\n    n: int\n",
        "demo/product.py": "def f():\n    class Limits:\n        pass\n",  # nested: not a module's class
        "tests/test_x.py": "class Limits:\n    pass\n",  # tests are not scanned
        "liverl/io/spool.py": "class Spool:\n    class Limits:\n        pass\n",
    }))
    assert classes_defined_twice(defined) == ["Limits: ingest.validation, serving.generation"]


def test_imports_within_a_stage_or_of_liverl_are_allowed(tmp_path):
    graph = import_graph(plant(tmp_path, {
        "serving/api.py": "from serving.auth import OPEN\nfrom liverl.access import bearer\nimport grpc\n",
        "serving/auth.py": "", "liverl/access/bearer.py": "import hmac\n",
        "tests/test_x.py": "import serving.api, ingest.capture\n",  # tests may import anything
        "demo/run.py": "from serving.auth import OPEN\n",  # demo/ drives the stages
    }))
    assert rule_breaks(graph) == [] and cycles(graph) == []
    assert graph["serving.api"] == {"serving.auth", "liverl.access.bearer"}


def subpackages(root: Path) -> list[str]:
    """Each stage's and liverl's own subpackages, one level down ("serving/swap/"), as the README names them."""
    return sorted(f"{init.parent.relative_to(root).as_posix()}/"
                  for top in ("liverl", *STAGES, *OUTSIDE_THE_STAGES) for init in (root / top).glob("*/__init__.py"))


def test_the_readme_layout_names_every_subpackage():
    """A newcomer finds the folder of a change from the README's layout table: a subpackage is named by its path or,
    in its top folder's row, by its own name."""
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {row.split("`")[1]: row for row in layout.splitlines() if row.startswith("| `")}
    found = subpackages(ROOT)
    assert {"serving/swap/", "trainer/gate/", "liverl/io/"} <= set(found), found  # the scan sees them

    def named(folder: str) -> bool:
        top, own = folder.split("/", 1)
        return f"`{folder}`" in layout or f"`{own}`" in rows.get(f"{top}/", "")
    assert [folder for folder in found if not named(folder)] == []
