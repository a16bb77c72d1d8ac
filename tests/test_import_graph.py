"""lore's import graph: no circles, no import running back up its layers, and a backend's
package imported only by the composition root and by itself.

Every import statement counts: at module level, inside a function and under
``if TYPE_CHECKING:`` alike, since each one ties the two modules together whether or not
Python runs it at import time. The graph is read from ``src/`` with the standard ``ast``
module (a small walk and Tarjan's components rather than grimp or import-linter: no new
dependency, and the layers below stay readable beside the rules they feed).

Run it as a script to print the figures (modules, import edges, circles, back edges):

    python tests/test_import_graph.py
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: lore's layers, top to bottom (docs/architecture.md draws them). A module belongs to the
#: layer of the longest prefix naming it, and may import its own layer (without a circle)
#: and any layer below; never one above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # What a person or an agent calls: commands, the service, MCP, the adapters, the suites.
    ("entry points", (
        "lore.cli", "lore.web", "lore.mcp_server", "lore.mcp_stdio", "lore.integrations", "lore.testing",
    )),
    # Runs driven by the settings that ask the root for their parts.
    ("jobs", ("lore.sync", "lore.schedule", "lore.reembed")),
    # The one place that reads settings to build parts, and names backends and embedders.
    ("composition root", ("lore.resolve",)),
    # What the root wires from parts: the tool and its chain, alerts, events, metrics, eval.
    ("services", (
        "lore.tool", "lore.alerts", "lore.events", "lore.eval", "lore.metrics", "lore.serving",
        "lore.mcp_tools",
        # The HTTP server every entry point serves on (uvicorn, drained on a stop).
        "lore.draining",
        # Runbooks as Agent Skills over the index, the chain and the access rule.
        "lore.skills",
        # Ranking policy over passages: named evidence, source priority, arrangement; files
        # lore writes.
        "lore.named", "lore.priority", "lore.arrange", "lore.private_files",
    )),
    # One implementation of a seam or a stage each, taking instances.
    ("parts", (
        "lore.backends", "lore.embedders", "lore.rerankers", "lore.sources", "lore.chunking",
        "lore.sync_pipeline", "lore.schedule_history", "lore.safety", "lore.vault",
        "lore.events.sqlite_store",
        # lore.tracing's hooks as OpenTelemetry spans (the otel extra), installed by the root.
        "lore.otel",
    )),
    ("seams and settings", ("lore.protocols", "lore.config", "lore.config_sources", "lore.source_tables")),
    ("foundation", (
        "lore", "lore.errors", "lore.models", "lore.access", "lore.events.record", "lore.events.timing",
        "lore.breaker", "lore.fusion", "lore.confidence", "lore.text_blocks", "lore.observe",
        "lore.interrupt", "lore.startup_trace", "lore.schedule_cadence", "lore.intent",
        # The tracing hooks every layer calls; what records them is installed from above.
        "lore.tracing",
        # Bytes of a file to Markdown: a library of its own, on errors alone.
        "lore.extract",
        # The one migration runner every store's schema uses.
        "lore.migrations",
    )),
]

#: The composition root: the one module that turns settings into parts by name.
ROOT = "lore.resolve"
BACKEND_PACKAGE = re.compile(r"^lore\.backends\.(sqlite|pgvector|qdrant|elasticsearch|discovery_engine)\b")


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module under src/lore by dotted name (a package by its own name)."""
    found = {}
    for path in (src / "lore").rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str, known: dict[str, Path]) -> str:
    while name not in known:
        name = name.rpartition(".")[0]
    return name


def _imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            yield from (_owner(dotted, known) for dotted in names if dotted.split(".")[0] == "lore")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            if base.split(".")[0] != "lore":
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in known else _owner(base, known)


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the lore modules it imports (the implicit import of a parent package left out)."""
    known = modules(src)
    return {name: set(_imported(name, path, known)) - {name} for name, path in sorted(known.items())}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
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
    return sorted(found)


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` (0 is the top) of the longest prefix naming ``module``."""
    best, depth = -1, -1
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # ``lore`` names the package's own __init__ only, not everything under it.
            inside = module.startswith(prefix + ".") and prefix != "lore"
            if (module == prefix or inside) and prefix.count(".") > depth:
                best, depth = position, prefix.count(".")
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS (tests/test_import_graph.py)")
    return best


def back_edges(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module in a layer above the importer's."""
    return sorted(
        f"{source} -> {target} ({LAYERS[layer_of(source)][0]} -> {LAYERS[layer_of(target)][0]})"
        for source, targets in graph.items()
        for target in targets
        if layer_of(target) < layer_of(source)
    )


def foreign_backend_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a backend's package from outside it and outside the composition root."""
    found = []
    for source, targets in graph.items():
        for target in targets:
            match = BACKEND_PACKAGE.match(target)
            owner = match.group(0) if match else None
            if owner and source != ROOT and source != owner and not source.startswith(owner + "."):
                found.append(f"{source} -> {target}")
    return sorted(found)


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"__init__.py": "", **files}.items():
        (root / "lore" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "lore" / name).write_text(text, encoding="utf-8")
    return root


def test_a_circle_through_a_function_or_type_checking_import_is_found(tmp_path: Path) -> None:
    src = _package(tmp_path, {
        "a.py": "from lore import b\n",
        "b.py": "def f():\n    from lore.c import g\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
    })
    assert circles(import_graph(src)) == [["lore.a", "lore.b", "lore.c"]]


def test_names_imported_from_a_package_are_no_circle(tmp_path: Path) -> None:
    """The look-alike: ``from lore.pkg import name`` of a name (not a submodule) ties the
    importer to the package's __init__ only, and a child's import of its parent is none."""
    src = _package(tmp_path, {
        "pkg/__init__.py": "VALUE = 1\n",
        "pkg/child.py": "from lore.pkg import VALUE\n",
        "user.py": "from lore.pkg import VALUE\nfrom lore.pkg import child\n",
    })
    graph = import_graph(src)
    assert circles(graph) == []
    assert graph["lore.user"] == {"lore.pkg", "lore.pkg.child"}


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_no_import_runs_back_up() -> None:
    assert back_edges(import_graph()) == []


def test_backend_packages_are_imported_only_by_the_root_and_themselves() -> None:
    assert foreign_backend_imports(import_graph()) == []


def main() -> None:
    graph = import_graph()
    found = circles(graph)
    back = back_edges(graph)
    foreign = foreign_backend_imports(graph)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} import edges, {len(LAYERS)} layers")
    print(f"{len(found)} circles")
    for component in found:
        print("  " + " <-> ".join(component))
    print(f"{len(back)} back edges")
    for edge in back:
        print("  " + edge)
    print(f"{len(foreign)} imports of a backend from outside it")
    for edge in foreign:
        print("  " + edge)


if __name__ == "__main__":
    sys.exit(main())
