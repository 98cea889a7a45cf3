"""The package's layers: every import runs down the layer order or stays in its layer, there is no cycle (through a
package's ``__init__`` included), no private name crosses modules, and every module and definition stays a size a
person can read. Imports are read statically, function-level ones included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "pdcalc"

#: The layers, bottom first. A module may import from its own layer and the layers before it.
LAYERS = ("core", "hardware", "model", "layout", "perf", "reality", "plan", "audit", "book", "cli")
#: Modules outside the layers: the package root may import these and nothing else.
ROOT_IMPORTS = {"pdcalc.core", "pdcalc.core.errors", "pdcalc.legacy"}
MAX_MODULE_LINES = 800
MAX_DEFINITION_LINES = 120


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(PKG.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def parents(name: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``name`` is imported (the root's excepted: it is the
    package's face and imports only :data:`ROOT_IMPORTS`)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def imports_of(tree: ast.AST, mods: dict) -> set[str]:
    """The pdcalc modules a module's source imports anywhere, with the package ``__init__`` files each import
    runs."""
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pdcalc" \
                and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                targets.add(sub if sub in mods else node.module)
                if sub in mods:
                    targets.add(node.module)            # `from pdcalc.audit import budgets` runs audit/__init__
        elif isinstance(node, ast.Import):
            targets |= {a.name for a in node.names if a.name.split(".")[0] == "pdcalc"}
    for t in list(targets):
        targets |= set(parents(t))
    return {t for t in targets if t in mods}


def import_graph() -> dict[str, set[str]]:
    """Module -> the pdcalc modules it imports (and the package ``__init__`` files it runs by being imported)."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        targets = imports_of(ast.parse(path.read_text(encoding="utf-8")), mods) | set(parents(name))
        graph[name] = {t for t in targets if t != name}
    return graph


def layer(name: str) -> int | None:
    """Index of ``name``'s layer in :data:`LAYERS`; ``pdcalc.legacy`` sits with ``core``; None for the root."""
    if name == "pdcalc":
        return None
    first = name.split(".")[1]
    return 0 if first == "legacy" else LAYERS.index(first)


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs up the layer order (or from the root to anything but :data:`ROOT_IMPORTS`)."""
    out = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            if a == "pdcalc":
                if b not in ROOT_IMPORTS:
                    out.append(f"{a} -> {b}")
            elif b != "pdcalc" and layer(b) > layer(a):
                out.append(f"{a} ({LAYERS[layer(a)]}) -> {b} ({LAYERS[layer(b)]})")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def private_imports(name: str, tree: ast.AST, mods: dict) -> list[str]:
    """Private names (a leading underscore) ``name`` takes from another pdcalc module: imported by name, or read
    as an attribute of an imported pdcalc module."""
    out, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pdcalc":
            for a in node.names:
                if f"{node.module}.{a.name}" in mods:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif a.name.startswith("_"):
                    out.append(f"{name} imports {node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "pdcalc" and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            out.append(f"{name} reads {aliases[node.value.id]}.{node.attr}")
    return out


# ------------------------------------------------------------------------------ the checkers check
def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_a_cycle_through_a_package_init_is_found():
    """``pdcalc.audit``'s ``__init__`` importing its modules while they import the package back is a cycle."""
    mods = {"pdcalc.audit": None, "pdcalc.audit.budgets": None, "pdcalc.audit.architecture": None}
    init = imports_of(ast.parse("from pdcalc.audit import budgets"), mods) - {"pdcalc.audit"}
    sub = imports_of(ast.parse("from pdcalc.audit import architecture"), mods) | set(parents("pdcalc.audit.budgets"))
    graph = {"pdcalc.audit": init, "pdcalc.audit.budgets": sub, "pdcalc.audit.architecture": {"pdcalc.audit"}}
    assert any({"pdcalc.audit", "pdcalc.audit.budgets"} <= set(c) for c in cycles(graph))


def test_an_upward_import_is_found():
    assert upward({"pdcalc.model.quant": {"pdcalc.perf.step"}, "pdcalc.perf.step": {"pdcalc.model.quant"}}) == [
        "pdcalc.model.quant (model) -> pdcalc.perf.step (perf)"]
    assert upward({"pdcalc": {"pdcalc.perf.step"}}) == ["pdcalc -> pdcalc.perf.step"]


def test_a_private_import_is_found():
    mods = {"pdcalc.audit.registry": None, "pdcalc.audit": None}
    src = "from pdcalc.audit.registry import _raw\nfrom pdcalc.audit import registry as r\nx = r._bound\n"
    assert private_imports("m", ast.parse(src), mods) == ["m imports pdcalc.audit.registry._raw",
                                                        "m reads pdcalc.audit.registry._bound"]


def test_graph_sees_the_package():
    g = import_graph()
    assert {"pdcalc.cli", "pdcalc.audit.claims", "pdcalc.audit.registry", "pdcalc.audit.v3_tables",
            "pdcalc.model.config", "pdcalc.perf.step"} <= set(g)
    assert "pdcalc.audit.registry" in g["pdcalc.audit.v3_tables"] and "pdcalc.audit" in g["pdcalc.audit.claims"]
    assert {layer(m) for m in g if m != "pdcalc"} == set(range(len(LAYERS)))


# ------------------------------------------------------------------------------ the package
def test_every_import_runs_down_the_layers():
    assert upward(import_graph()) == []


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_no_private_name_crosses_modules():
    mods = modules()
    found = [x for name, p in sorted(mods.items())
             for x in private_imports(name, ast.parse(p.read_text(encoding="utf-8")), mods)]
    assert found == []


def test_every_layer_says_what_it_is_for_and_what_it_may_import():
    for name in LAYERS[:-1]:
        doc = ast.get_docstring(ast.parse((PKG / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "May import" in doc and len(doc.splitlines()) <= 3, name


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_and_definitions_stay_readable(name):
    path = modules()[name]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    long = [f"{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.end_lineno - n.lineno + 1 > MAX_DEFINITION_LINES]
    assert long == []
