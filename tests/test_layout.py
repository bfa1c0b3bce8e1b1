"""The package's layout rules, checked on the source text.

- Layers: each package's `__init__` docstring ends with `Imports from: ...`, the packages it
  may import; every `import transformer.x` anywhere in that package (function-level imports
  included) must name one of them or its own package, and the rule must form no cycle.
- Layout: the formatter lays code out; its opt-out comment marks only the data tables below.
- Map: docs/architecture.md's package map lists every module of every layer.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import ROOT

PACKAGE = Path(ROOT) / "transformer"
# Data tables, not logic, laid out by hand: the synthetic corpus's word lists.
DATA_TABLES = {"transformer/data/synthetic/lexicon.py"}
CHECKED_TREES = [
    "transformer",
    "benchmarks",
    "configs",
    "examples",
    "tests",
    "train.py",
    "eval.py",
    "decode.py",
]


def _layers() -> dict[str, set[str]]:
    """{package: the packages its docstring allows it to import}."""
    layers = {}
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        match = re.search(r"Imports from: (.*?)\.?\s*$", doc, re.S)
        assert match, f"{init} docstring has no 'Imports from:' line"
        allowed = match.group(1)
        if allowed.startswith("nothing"):
            names = set()
        elif allowed.startswith("every other package"):
            names = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} - {init.parent.name}
        else:
            names = {n.strip().removeprefix("transformer.") for n in allowed.split(",")}
        layers[init.parent.name] = names
    return layers


def _imported_packages(path: Path) -> set[str]:
    """Top-level packages of `transformer` that the module imports (any scope)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] == "transformer":
                if len(parts) > 1:
                    found.add(parts[1])
                else:  # from transformer import name: the lazy public API at the top
                    found.add("<top>")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "transformer" and len(parts) > 1:
                    found.add(parts[1])
    return found


def test_every_package_states_its_layer_and_the_layers_form_no_cycle():
    layers = _layers()
    assert set(layers) == {
        "common",
        "model",
        "data",
        "scoring",
        "inference",
        "training",
        "evaluation",
        "interop",
        "research",
        "cli",
    }
    for package, allowed in layers.items():
        assert allowed <= set(layers), f"{package} names unknown packages {allowed - set(layers)}"
    done: set[str] = set()
    while len(done) < len(layers):  # peel off packages whose imports are all done
        ready = [p for p, allowed in layers.items() if p not in done and allowed <= done]
        assert ready, f"the import rule has a cycle among {sorted(set(layers) - done)}"
        done.update(ready)


def test_no_module_imports_a_higher_layer():
    layers = _layers()
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:
            continue  # transformer/__init__.py: the public API re-exports from every layer
        package = relative.parts[0]
        for imported in _imported_packages(path) - {package}:
            if imported not in layers[package]:
                violations.append(f"{relative} imports transformer.{imported}")
    assert not violations, "\n".join(violations)


def test_the_import_check_sees_function_level_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from transformer.training import loop\n    import transformer.cli.app\n"
    )
    assert _imported_packages(module) == {"training", "cli"}


def _python_files():
    for tree in CHECKED_TREES:
        path = Path(ROOT) / tree
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def test_only_data_tables_opt_out_of_the_formatter():
    marker = "# fmt: " + "skip"  # split so that this file does not match itself
    marked = [
        str(path.relative_to(ROOT))
        for path in _python_files()
        if marker in path.read_text() and str(path.relative_to(ROOT)) not in DATA_TABLES
    ]
    assert not marked, f"{marker} outside the data tables: {marked}"


def test_the_package_map_lists_every_module_of_every_layer():
    doc = (Path(ROOT) / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `(\w+)/` \| (.*?) \|", doc, re.M)
    listed = {package: set(re.findall(r"`([\w/]+)`", modules)) for package, modules in rows}
    assert set(listed) == set(_layers())
    for package, names in listed.items():
        root = PACKAGE / package
        on_disk = {
            path.relative_to(root).with_suffix("").as_posix()
            for path in root.rglob("*.py")
            if path.name != "__init__.py"
        }
        assert names == on_disk, (
            f"docs/architecture.md, {package}/: unlisted {sorted(on_disk - names)}, "
            f"gone {sorted(names - on_disk)}"
        )
