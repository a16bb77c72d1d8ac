"""lore's import graph: no circles, no import running back up its layers, and a backend's
package imported only by the composition root and by itself. And the composition root's
two rules: only the modules allowed below name the whole settings (``LoreSettings``,
``load_settings``), and only the root, the backends and the settings model name a backend.

Every import statement counts: at module level, inside a function and under
``if TYPE_CHECKING:`` alike, since each one ties the two modules together whether or not
Python runs it at import time. The graph is read from ``src/`` with the standard ``ast``
module (a small walk and Tarjan's components rather than grimp or import-linter: no new
dependency, and the layers below stay readable beside the rules they feed).

Run it as a script to print the figures (modules, import edges, circles, back edges,
and any break of the root's two rules):

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
        # SQLite's errors as lore's, for every part that keeps a SQLite file.
        "lore.sqlite_errors",
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


def back_edges(graph: dict[str, set[str]], *, skip_unlayered: bool = False) -> list[str]:
    """Imports of a module in a layer above the importer's (``skip_unlayered``: leave out
    the imports of a module in no layer, as an older checkout's may be, instead of failing)."""

    def layered(module: str) -> bool:
        try:
            layer_of(module)
        except AssertionError:
            if not skip_unlayered:
                raise
            return False
        return True

    return sorted(
        f"{source} -> {target} ({LAYERS[layer_of(source)][0]} -> {LAYERS[layer_of(target)][0]})"
        for source, targets in graph.items()
        for target in targets
        if layered(source) and layered(target) and layer_of(target) < layer_of(source)
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


# -- the composition root's rules ---------------------------------------------------------

#: What naming the whole settings means: importing one of these from ``lore.config``.
SETTINGS_NAMES = frozenset({"LoreSettings", "load_settings"})
#: Besides the root: the settings' own modules.
SETTINGS_MODULES = ("lore.config", "lore.config_sources", "lore.source_tables")
#: The factories the root calls by name with the settings: the sources' (``from_config``,
#: through ``lore.sources.build_source``), the backends' protocol and the shared helper of
#: the HTTP embedders. Each backend and embedder module the root's registries name is
#: allowed too (``registry_modules``).
FACTORY_MODULES = ("lore.sources", "lore.backends", "lore.embedders._http")
#: Layers whose modules load the settings and hand them to the root (reading their own
#: command's options, such as a port): the entry points and the jobs.
SETTINGS_LAYERS = ("entry points", "jobs")


def _registry(name: str, src: Path = SRC) -> dict[str, str]:
    tree = ast.parse((src / "lore" / "resolve.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            value: dict[str, str] = ast.literal_eval(node.value)
            return value
    raise AssertionError(f"lore.resolve defines no {name}")


def registry_modules(src: Path = SRC) -> set[str]:
    """The backend and embedder modules the root imports by name."""
    return {
        module
        for name in ("BACKENDS", "RETRIEVAL_ONLY", "EMBEDDERS")
        for module in _registry(name, src).values()
    }


def backend_names(src: Path = SRC) -> set[str]:
    return {*_registry("BACKENDS", src), *_registry("RETRIEVAL_ONLY", src)}


def _within(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def may_read_settings(module: str, src: Path = SRC) -> bool:
    if module == ROOT or module in SETTINGS_MODULES or module in registry_modules(src):
        return True
    if module in FACTORY_MODULES or _within(module, ("lore.sources",)):
        return True
    # A backend package's own modules: its ``from_settings`` and what it calls.
    if BACKEND_PACKAGE.match(module):
        return True
    return LAYERS[layer_of(module)][0] in SETTINGS_LAYERS


def _names_settings(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "lore.config" and not node.level:
            if any(alias.name in SETTINGS_NAMES or alias.name == "*" for alias in node.names):
                return True
        elif isinstance(node, ast.ImportFrom) and node.module == "lore" and not node.level:
            if any(alias.name == "config" for alias in node.names):
                return True
        elif isinstance(node, ast.Import) and any(alias.name == "lore.config" for alias in node.names):
            return True
    return False


def settings_readers(src: Path = SRC) -> list[str]:
    """Modules naming the whole settings that may not (every import counts, as above)."""
    return sorted(
        name
        for name, path in modules(src).items()
        if _names_settings(ast.parse(path.read_text(encoding="utf-8"))) and not may_read_settings(name, src)
    )


def backend_namers(src: Path = SRC) -> list[str]:
    """Where a backend's name is written as a string outside the root, the backends and
    the settings model (whose default and ``[fallback]`` backend name one)."""
    names = backend_names(src)
    found = []
    for module, path in modules(src).items():
        if module == ROOT or module == "lore.config" or _within(module, ("lore.backends",)):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{module}:{node.lineno} {node.value!r}")
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


def test_a_service_naming_the_settings_is_found(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "resolve.py": (
                "BACKENDS = {'sqlite': 'lore.backends.sqlite'}\nRETRIEVAL_ONLY = {}\nEMBEDDERS = {}\n"
            ),
            "config.py": "class LoreSettings: ...\n",
            "tool/__init__.py": "",
            "tool/core.py": "def f():\n    from lore.config import load_settings\n",
            # The look-alike: a sub-table's model is a value a part may take.
            "alerts/__init__.py": "",
            "alerts/lookup.py": "from lore.config import AlertSettings\n",
            "cli/__init__.py": "from lore.config import LoreSettings\n",
            "backends/__init__.py": "",
            "backends/sqlite/__init__.py": "from lore.config import LoreSettings\nNAME = 'sqlite'\n",
            "metrics.py": "ENGINE = 'sqlite'\n",
        },
    )
    assert settings_readers(src) == ["lore.tool.core"]
    assert backend_namers(src) == ["lore.metrics:1 'sqlite'"]


def test_only_the_root_the_settings_entry_points_and_factories_name_the_settings() -> None:
    """Wrappers and services take instances, never settings (``lore.resolve`` builds them)."""
    assert settings_readers() == []


def test_only_the_root_the_backends_and_the_settings_model_name_a_backend() -> None:
    assert backend_namers() == []


def main(argv: list[str] | None = None) -> None:
    """``--src DIR``: the figures of another checkout's ``src`` (its modules in no layer of
    today's list are counted and left out of the back edges)."""
    import argparse

    parser = argparse.ArgumentParser(description="lore's import graph figures")
    parser.add_argument(
        "--src", type=Path, default=SRC, help="the src/ folder to read (default: this checkout's)"
    )
    src = parser.parse_args(argv).src.resolve()
    graph = import_graph(src)
    found = circles(graph)
    unlayered = []
    for module in graph:
        try:
            layer_of(module)
        except AssertionError:
            unlayered.append(module)
    back = back_edges(graph, skip_unlayered=True)
    foreign = foreign_backend_imports(graph)
    print(f"{src}: {len(graph)} modules, {sum(map(len, graph.values()))} import edges, {len(LAYERS)} layers")
    if unlayered:
        print(f"{len(unlayered)} modules in no layer (left out of the back edges): {', '.join(unlayered)}")
    print(f"{len(found)} circles")
    for component in found:
        print("  " + " <-> ".join(component))
    print(f"{len(back)} back edges")
    for edge in back:
        print("  " + edge)
    print(f"{len(foreign)} imports of a backend from outside it")
    for edge in foreign:
        print("  " + edge)
    readers = settings_readers(src)
    print(f"{len(readers)} modules naming the settings outside the root's allowance")
    for module in readers:
        print("  " + module)
    namers = backend_namers(src) if (src / "lore" / "resolve.py").exists() else []
    print(f"{len(namers)} backend names outside the root and the backends")
    for place in namers:
        print("  " + place)


if __name__ == "__main__":
    sys.exit(main())
