"""Check a user's install of lore: what `pip install lore` or `pip install 'lore-sre[local]'` gives.

Run it with the Python of a throwaway venv into which the package was installed the way a user
installs it (not editable, no `[dev]`): `make check-install` does. It fails when a module that
the installed extras are meant to support cannot be imported (an undeclared dependency, or one
declared in the wrong extra), or when the main job fails:

* base install: `lore --help`; `lore sync` with the default (local) embedder stops with one
  line naming the extra; `lore sync` and `lore search` with `embedder = "hashing"` work;
* with `--extras local`: `lore sync` and `lore search` on the default local model.

Everything is written to a temporary folder; the checkout's own lore.db is never touched.
Only the standard library here: this runs before anything but lore is installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTION = "lore-sre"
CONFIG = REPO / "examples" / "lore.toml"
QUERY = "etcd cluster has no leader, what do I do?"
EXPECTED_HIT = "etcd"

#: The lore modules that need an extra just to be imported. Every other module must import
#: on a base install; a new module that needs an extra belongs here (and its extra in
#: pyproject.toml), or the base check fails and says so.
NEEDS_EXTRA = {
    # these raise MissingExtraError (naming the extra) when imported without it
    "lore.backends.pgvector.reembed": "pgvector",
    "lore.backends.pgvector.schema": "pgvector",
    "lore.backends.pgvector": "pgvector",
    "lore.backends.pgvector.backend": "pgvector",
    "lore.backends.pgvector.bm25": "pgvector",
    "lore.backends.pgvector.bulk": "pgvector",
    "lore.backends.pgvector.counting": "pgvector",
    "lore.backends.pgvector.errors": "pgvector",
    "lore.backends.pgvector.events": "pgvector",
    "lore.backends.pgvector.channels": "pgvector",
    "lore.backends.pgvector.ledger": "pgvector",
    "lore.backends.pgvector.replicas": "pgvector",
    "lore.backends.pgvector.postings": "pgvector",
    "lore.backends.pgvector.statements": "pgvector",
    "lore.backends.pgvector.analysis": "pgvector",
    "lore.backends.pgvector.tables": "pgvector",
    "lore.backends.qdrant": "qdrant",
    "lore.backends.qdrant.backend": "qdrant",
    "lore.backends.qdrant.layout": "qdrant",
    "lore.backends.qdrant.local": "qdrant",
    "lore.backends.qdrant.queries": "qdrant",
    "lore.backends.qdrant.reembed": "qdrant",
    "lore.embedders.openvino_runtime": "local",
    "lore.embedders.openvino_torch": "local-torch",
    "lore.integrations.adk": "adk",
    "lore.integrations.langchain": "langchain",
    "lore.mcp_server": "mcp",
    # the HTTP server of lore mcp --http and lore serve (uvicorn, in both extras)
    "lore.draining": "mcp",
    # lore.tracing's hooks as OpenTelemetry spans; the base install traces nothing
    "lore.otel": "otel",
    # /metrics of lore serve and lore mcp --http (prometheus-client, in both extras)
    "lore.metrics": "mcp",
    # lore serve's web layer (FastAPI); lore.web.tokens and lore.web.managed are base
    "lore.web.app": "serve",
    "lore.web.extraction": "serve",
    "lore.web.guard": "serve",
    "lore.web.oauth": "serve",
    "lore.web.server": "serve",
    "lore.web.auth": "serve",
    "lore.web.limits": "serve",
    "lore.web.mcp_mount": "serve",
    "lore.web.problems": "serve",
    "lore.web.routes_documents": "serve",
    "lore.web.routes_events": "serve",
    "lore.web.routes_metrics": "serve",
    "lore.web.routes_search": "serve",
    "lore.web.routes_session": "serve",
    "lore.web.routes_sources": "serve",
    "lore.web.routes_sync": "serve",
    "lore.web.service": "serve",
    "lore.web.sync_runner": "serve",
    # the conformance suite runs under pytest, which a backend author's tests bring
    "lore.testing.conformance": "dev",
    "lore.testing.access_conformance": "dev",
    "lore.testing.query_conformance": "dev",
    "lore.testing.suite": "dev",
    "lore.testing.run_history": "dev",
    "lore.testing.event_store": "dev",
    "lore.testing.source_conformance": "dev",
}


#: Commands of an extra, run on a base install: (extra, lore arguments, environment).
#: The DSN names a closed port on 127.0.0.1; nothing is ever reached.
REFUSED_WITHOUT_EXTRA = [
    ("pgvector", ["sync"], {"LORE_BACKEND": "pgvector", "LORE_PG_DSN": "postgresql://lore@127.0.0.1:9/lore"}),
    ("qdrant", ["sync"], {"LORE_BACKEND": "qdrant"}),
    ("elasticsearch", ["sync"], {"LORE_BACKEND": "elasticsearch", "LORE_ELASTICSEARCH__URL": "http://127.0.0.1:9"}),
    ("opensearch", ["sync"], {"LORE_BACKEND": "opensearch", "LORE_ELASTICSEARCH__URL": "http://127.0.0.1:9"}),
    ("discovery-engine", ["search", "etcd"], {"LORE_BACKEND": "discovery_engine"}),
    # stdio is served without the SDK (lore.mcp_stdio); --http needs it
    ("mcp", ["mcp", "--http"], {}),
    ("serve", ["serve"], {}),
]


class CheckFailed(Exception):
    pass


def installed_lore() -> Path:
    """lore as installed into this interpreter's environment, never the source tree."""
    import lore

    location = Path(lore.__file__).resolve().parent
    if not location.is_relative_to(Path(sys.prefix).resolve()):
        raise CheckFailed(
            f"lore is imported from {location}, not from the venv {sys.prefix}: "
            "unset PYTHONPATH and install without -e"
        )
    return location


def _lore_modules(path: list[str], prefix: str = "lore.") -> list[pkgutil.ModuleInfo]:
    """Every module below ``path``, found without importing any (``pkgutil.walk_packages``
    imports each package to look inside it, and a backend package of a missing extra
    refuses to be imported: that is what NEEDS_EXTRA says)."""
    found = []
    for info in pkgutil.iter_modules(path, prefix):
        found.append(info)
        if info.ispkg:
            folder = Path(getattr(info.module_finder, "path", "")) / info.name.rsplit(".", 1)[-1]
            found.extend(_lore_modules([str(folder)], info.name + "."))
    return found


def check_imports(extras: set[str]) -> list[str]:
    """Import every lore module the installed extras support; the failures, one line each."""
    import lore

    failures = []
    count = 0
    for module in _lore_modules(lore.__path__):
        extra = NEEDS_EXTRA.get(module.name)
        if extra is not None and extra not in extras:
            continue
        count += 1
        try:
            importlib.import_module(module.name)
        except Exception as err:  # any failure to import is the finding, reported in one line
            needs = f"lore-sre[{extra}]" if extra else "the base install"
            failures.append(f"{module.name} ({needs}): {type(err).__name__}: {err}")
    print(f"check-install: imported {count - len(failures)}/{count} lore modules", flush=True)
    return failures


def run_lore(
    args: list[str], env: dict[str, str], expect_ok: bool = True
) -> subprocess.CompletedProcess[str]:
    lore = Path(sys.executable).parent / "lore"
    result = subprocess.run(
        [str(lore), *args], capture_output=True, text=True, env=env, cwd=REPO, check=False, timeout=900
    )
    settings = [f"{key}={env[key]}" for key in ("LORE_BACKEND", "LORE_EMBEDDER") if key in env]
    shown = " ".join([*settings, "lore", *args])
    print(f"check-install: {shown} -> exit {result.returncode}", flush=True)
    if "Traceback" in result.stderr:
        raise CheckFailed(f"{shown} printed a traceback:\n{result.stderr[-3000:]}")
    if expect_ok and result.returncode != 0:
        raise CheckFailed(f"{shown} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def user_environment(scratch: Path) -> dict[str, str]:
    """The caller's environment without anything that would point lore elsewhere: no
    PYTHONPATH (the source tree), no LORE_* settings; state and cache in the scratch folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("LORE_")}
    env["LORE_DB_PATH"] = str(scratch / "lore.db")
    env["LORE_AUDIT_PATH"] = str(scratch / "audit.jsonl")
    env["XDG_CACHE_HOME"] = str(scratch / "cache")
    return env


#: What the default local install must not bring: PyTorch and its CUDA libraries
#: (the model runs on OpenVINO), sentence-transformers, transformers.
HEAVY = ("torch", "sentence-transformers", "transformers", "triton")
#: The default local install's size on disk must stay under this (PyTorch alone is ~1 GB).
LOCAL_BUDGET_BYTES = 1 << 30


def check_distribution(extras: set[str]) -> None:
    """The installed distribution is lore's, under the name its metadata declares, and
    the default local install is small and CPU-only by what it declares."""
    from importlib import metadata

    name = metadata.metadata(DISTRIBUTION)["Name"]
    if name != DISTRIBUTION:
        raise CheckFailed(f"the installed distribution is named {name!r}, not {DISTRIBUTION!r}")
    installed = {(dist.metadata["Name"] or "").lower() for dist in metadata.distributions()}
    if "local" in extras:
        heavy = sorted(n for n in installed if n in HEAVY or n.startswith(("nvidia-", "cuda-")))
        if heavy:
            raise CheckFailed(f"the default local install brought {', '.join(heavy)}")
        files = (f for f in Path(sys.prefix).rglob("*") if f.is_file() and not f.is_symlink())
        size = sum(f.stat().st_size for f in files)
        print(f"check-install: {DISTRIBUTION}[local] is {size / 2**20:.0f} MiB on disk", flush=True)
        if size > LOCAL_BUDGET_BYTES:
            raise CheckFailed(f"the local install takes {size / 2**20:.0f} MiB, over 1 GiB")


def check_main_job(extras: set[str], scratch: Path) -> None:
    env = user_environment(scratch)
    config = ["--config", str(CONFIG)]
    run_lore(["--help"], env)
    version = run_lore(["--version"], env).stdout.strip()
    if not version.startswith("lore ") or len(version.split()) != 2:
        raise CheckFailed(f"`lore --version` printed {version!r}, not 'lore VERSION'")
    if "local" not in extras:
        refused = run_lore([*config, "sync"], env, expect_ok=False)
        if refused.returncode != 2 or "lore-sre[local]" not in refused.stderr:
            raise CheckFailed(
                "on a base install, `lore sync` with the default embedder must exit 2 naming "
                f"lore-sre[local]; got exit {refused.returncode}:\n{refused.stderr}"
            )
        env["LORE_EMBEDDER"] = "hashing"
        # what the other extras bring, asked for without them: one line naming the extra
        for extra, args, extra_env in REFUSED_WITHOUT_EXTRA:
            if extra not in extras:
                refused = run_lore([*config, *args], {**env, **extra_env}, expect_ok=False)
                if refused.returncode != 2 or f"lore-sre[{extra}]" not in refused.stderr:
                    raise CheckFailed(
                        f"without lore-sre[{extra}], `lore {' '.join(args)}` must exit 2 naming it; "
                        f"got exit {refused.returncode}:\n{refused.stderr}"
                    )
    run_lore([*config, "sync"], env)
    found = run_lore([*config, "search", QUERY, "--top-k", "3"], env)
    if EXPECTED_HIT not in found.stdout.lower():
        raise CheckFailed(f"`lore search {QUERY!r}` did not find the {EXPECTED_HIT} runbook:\n{found.stdout}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="", help="comma-separated extras that were installed")
    options = parser.parse_args(argv)
    extras = {name.strip() for name in options.extras.split(",") if name.strip()}
    label = f"lore-sre[{','.join(sorted(extras))}]" if extras else f"{DISTRIBUTION} (base)"
    try:
        print(f"check-install: {label} from {installed_lore()}", flush=True)
        check_distribution(extras)
        failures = check_imports(extras)
        if failures:
            raise CheckFailed("modules that do not import:\n  " + "\n  ".join(failures))
        with tempfile.TemporaryDirectory(prefix="lore-check-install-") as scratch:
            check_main_job(extras, Path(scratch))
    except CheckFailed as err:
        print(f"check-install FAILED for {label}: {err}", file=sys.stderr)
        return 1
    print(f"check-install: {label} OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
