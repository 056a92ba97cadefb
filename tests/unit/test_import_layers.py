"""The package's import graph: every import goes down the layers, none closes a circle, and the
Docker SDK is the host layer's alone (issue 27, "a whole host boundary").

The graph is read from the source (``ast``): module-level imports, imports inside functions
(lazy, they still tie the modules) and ``TYPE_CHECKING`` imports alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "servedeck"

#: The package's layers, bottom first: a module imports only from layers below its own (or
#: from its own subpackage). ``servedeck`` is the package's ``__init__`` (its version).
LAYERS: list[set[str]] = [
    {"servedeck", "findings", "numfmt", "yaml11", "grammar", "safetext", "dotted"},
    {"errors"},
    {"fsutil"},
    {"yamlio", "jsonio", "vllm"},
    {"runs", "launchers"},
    {"model"},
    {"compose"},
    {"host"},
    {"deploy"},
    {"bench"},
    {"ab"},
    {"fleet"},
    {"cli"},
    {"__main__"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import mod`` names the module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.update(f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_no_module_of_the_package_is_in_an_import_circle():
    assert _circles(_graph()) == []


def test_every_import_between_subpackages_goes_down_the_layers():
    graph = _graph()
    upward = [(a, b) for a, outs in graph.items() for b in sorted(outs)
              if a.split(".")[:2] != b.split(".")[:2] and _layer(a) <= _layer(b)]
    assert upward == []


def test_every_module_has_a_layer():
    tops = {m.split(".")[1] if "." in m else m for m in _graph()}
    assert tops <= set().union(*LAYERS)


def test_only_the_host_layer_imports_the_docker_sdk():
    users = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "docker" or n.startswith("docker.") for n in names):
                users.append(path.relative_to(PACKAGE).as_posix())
    assert users and all(u.startswith("host/") for u in users), users


def test_the_graph_reader_sees_a_circle_and_an_upward_import():
    """The checks above can fail: a circle and an import up the layers, made by hand."""
    graph = {"servedeck.model.a": {"servedeck.compose.b"}, "servedeck.compose.b": {"servedeck.model.a"}}
    assert _circles(graph) == [["servedeck.compose.b", "servedeck.model.a"]]
    assert _layer("servedeck.model.a") < _layer("servedeck.compose.b")  # the first arrow runs up
