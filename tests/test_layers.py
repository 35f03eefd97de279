"""The layer rule of docs/ARCHITECTURE.md: imports point down the layers, never up or sideways,
and no two modules import each other, directly or around a circle.

Every import counts, at module level or inside a function, under TYPE_CHECKING or not; the
circle check alone leaves out the imports inside the functions of DEFERRED_IMPORTS' modules.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent

# Each package's folder in the checkout (pyproject.toml's package-dir says the same).
FOLDERS = {
    "eqsat": "eqsat",
    "eqsat.rewrites": "rewrites",
    "eqsat.extract": "extract",
    "eqsat.backend_c": "backend_c",
}

# Bottom to top. A module may import modules of its own package and of lower layers only;
# packages that share a layer stand beside each other and import neither.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("eqsat.core",),  # term language, interpreter, driver, numerics
    ("eqsat.extract",),  # machine model, cost models, extractors
    ("eqsat.rewrites", "eqsat.backend_c"),  # rules and passes; C emission, build, Kernel
    ("eqsat.view",),  # pictures of e-graphs and measurements
    ("eqsat",),  # the public API: frontend, api, tracing, autotune
    ("eqsat.tools",),  # command-line tools: bench, demo, model_check, the rule catalog
    ("eqsat.__main__",),  # `python -m eqsat`
)
LAYER_OF = {package: level for level, packages in enumerate(LAYERS) for package in packages}

# Modules whose imports inside functions the circle check leaves out (the layer check does not):
# `Tensor`'s methods call the functions that build tensors, and those functions build Tensors, so
# each method imports what it calls when it runs (ARCHITECTURE §1).
DEFERRED_IMPORTS = frozenset({"eqsat.frontend.tensor"})


def package_of(module: str) -> str:
    """The longest prefix of `module` that is a package of LAYERS."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYER_OF:
            return prefix
    raise ValueError(f"{module} is in no layer")


def modules(folders: Mapping[str, str], root: Path) -> dict[str, Path]:
    """Every module of the packages in `folders` (package name -> folder under `root`)."""
    found = {}
    for package, folder in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imported_modules(
    path: Path, known: Mapping[str, Path], *, inside_functions: bool = True
) -> Iterator[str]:
    """The modules of `known` that `path` imports (`from p import m` counts as p.m when m is a
    module, else as p); without the imports inside its functions unless `inside_functions`."""
    tree = ast.parse(path.read_text())
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    nested = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, functions) and not inside_functions
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in nested:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in known
                else node.module
                for alias in node.names
            ]
        else:
            continue
        yield from (name for name in names if name in known)


def import_graph(
    folders: Mapping[str, str], root: Path, deferred: frozenset[str] = frozenset()
) -> dict[str, set[str]]:
    """Each module's imported modules; those inside functions of the `deferred` modules left out."""
    known = modules(folders, root)
    return {
        module: set(imported_modules(path, known, inside_functions=module not in deferred))
        - {module}
        for module, path in known.items()
    }


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """Imports that point up the layers or sideways to a package beside the importer's."""
    wrong = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            importer, imported = package_of(module), package_of(target)
            if importer != imported and LAYER_OF[imported] >= LAYER_OF[importer]:
                wrong.append(f"{module} imports {target} ({importer} -> {imported})")
    return wrong


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_every_module_is_in_a_layer() -> None:
    for module in modules(FOLDERS, CHECKOUT):
        package_of(module)


def test_imports_point_down_the_layers() -> None:
    assert upward_imports(import_graph(FOLDERS, CHECKOUT)) == []


def test_no_import_circle() -> None:
    assert circles(import_graph(FOLDERS, CHECKOUT, DEFERRED_IMPORTS)) == []


def test_checker_finds_an_upward_import_and_a_circle(tmp_path: Path) -> None:
    (tmp_path / "eqsat" / "core").mkdir(parents=True)
    (tmp_path / "eqsat" / "__init__.py").write_text("")
    (tmp_path / "eqsat" / "api.py").write_text("from eqsat.core import terms\n")
    (tmp_path / "eqsat" / "core" / "__init__.py").write_text("")
    (tmp_path / "eqsat" / "core" / "terms.py").write_text(
        "def f():\n    from eqsat.core.loops import g\n"
    )
    (tmp_path / "eqsat" / "core" / "loops.py").write_text(
        "import eqsat.core.terms\nfrom eqsat.api import compile\n"
    )
    graph = import_graph({"eqsat": "eqsat"}, tmp_path)
    assert upward_imports(graph) == ["eqsat.core.loops imports eqsat.api (eqsat.core -> eqsat)"]
    assert circles(graph) == [["eqsat.api", "eqsat.core.loops", "eqsat.core.terms"]]
    # a deferred module's imports inside functions leave the circle check, its others do not
    deferred = import_graph({"eqsat": "eqsat"}, tmp_path, frozenset({"eqsat.core.terms"}))
    assert circles(deferred) == []
    (tmp_path / "eqsat" / "core" / "terms.py").write_text("from eqsat.core.loops import g\n")
    assert circles(import_graph({"eqsat": "eqsat"}, tmp_path, frozenset({"eqsat.core.terms"})))


def test_a_module_outside_the_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="in no layer"):
        package_of("numpy.linalg")


def test_type_checkers_see_every_public_name_from_the_module_it_loads_from() -> None:
    """`eqsat/__init__.py` imports under TYPE_CHECKING exactly what `_PUBLIC` loads lazily (a
    star import: the module's `__all__`)."""
    import eqsat

    tree = ast.parse(Path(eqsat.__file__).read_text())
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    seen = {
        name: statement.module
        for statement in guarded.body
        if isinstance(statement, ast.ImportFrom) and statement.module is not None
        for alias in statement.names
        for name in (
            importlib.import_module(statement.module).__all__ if alias.name == "*" else [alias.name]
        )
    }
    assert seen == eqsat._PUBLIC
