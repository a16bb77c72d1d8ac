"""A newcomer's first ten minutes: fresh clone -> `make run` -> a page that answers a search,
then the second `make run` in the same clone.

    python3 bench/first_run.py [--runs 1] [--keep DIR]

Clones this checkout's HEAD into a temporary folder (as a user clones lore), runs
`make run PORT=<free port>` there with the system Python, and times, from the command's
start: the install done (the venv's run stamp written), the sync done (its summary
printed), the server ready (`/readyz` 200 and a search through `POST /v1/search` with the
demo token that answers with passages). Then Ctrl-C, and `make run` again in the same clone:
the install and the sync have nothing to do, so what remains is an incremental sync and the
server's start. pip's cache is the user's (warm after one install on this machine); the
model's OpenVINO cache is a fresh folder for the first run, kept for the second, as a new
user's would be. Prints one table a run, seconds of wall time, and the CPU seconds of the
processes that ran (children included).

Targets (issue "The first ten minutes"): fresh clone to a searchable page within 3 min with a
warm pip cache, a second `make run` within 20 s. The figures are only meaningful on a quiet
machine: say the load average beside them (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"viewer token for the demo \(demo-viewer\): (\S+)")
QUERY = "etcd cluster has no leader"
TARGETS_S = {"first": 180.0, "second": 20.0}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def searchable(port: int, token: str) -> bool:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/search",
        data=json.dumps({"query": QUERY, "top_k": 3}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as ready:
            if ready.status != 200:
                return False
        with urllib.request.urlopen(request, timeout=30) as answer:
            return bool(json.loads(answer.read()).get("passages"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def make_run(clone: Path, env: dict[str, str], budget_s: float) -> dict[str, float]:
    """One `make run`: seconds to each milestone, until a search answers; then Ctrl-C."""
    port = free_port()
    started = time.monotonic()
    marks: dict[str, float] = {}
    lines: list[str] = []
    process = subprocess.Popen(
        ["make", "run", f"PORT={port}"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    token: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            now = time.monotonic() - started
            if "lore sync (" in line and "sync" not in marks:
                marks["sync"] = now
            found = TOKEN.search(line)
            if found:
                token.append(found.group(1))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stamp = clone / ".venv" / ".lore-run"
    try:
        while time.monotonic() - started < budget_s:
            if "install" not in marks and stamp.exists():
                marks["install"] = time.monotonic() - started
            if process.poll() is not None:
                raise RuntimeError("make run exited:\n" + "".join(lines[-40:]))
            if token and searchable(port, token[0]):
                marks["searchable"] = time.monotonic() - started
                break
            time.sleep(0.25)
        else:
            raise RuntimeError(f"no answer within {budget_s:.0f} s:\n" + "".join(lines[-40:]))
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(timeout=5)
    marks.setdefault("install", 0.0)
    return marks


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="fresh clones to time (default 1)")
    parser.add_argument("--budget", type=float, default=1200.0, help="seconds before giving up on a run")
    parser.add_argument("--keep", type=Path, help="keep the clones under this folder")
    options = parser.parse_args()
    if shutil.which("make") is None or shutil.which("git") is None:
        print("first_run: needs make and git", file=sys.stderr)
        return 2
    rows: list[tuple[str, dict[str, float], float]] = []
    for run in range(options.runs):
        base = Path(tempfile.mkdtemp(prefix="lore-first-run-", dir=options.keep))
        clone = base / "lore"
        subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True)
        skip = ("LORE_", "VIRTUAL_ENV", "PYTHONPATH")
        env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        env["XDG_CACHE_HOME"] = str(base / "cache")  # a new user's model cache; pip's stays warm
        env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
        for label in ("first", "second"):
            before = children_cpu()
            marks = make_run(clone, env, options.budget)
            rows.append((f"{label} (clone {run + 1})", marks, children_cpu() - before))
        if options.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    print()
    print("| make run | install done | sync done | searchable | target | CPU s |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, marks, cpu in rows:
        target = TARGETS_S["first" if label.startswith("first") else "second"]
        print(
            f"| {label} | {marks['install']:.0f} s | {marks.get('sync', float('nan')):.0f} s | "
            f"{marks['searchable']:.0f} s | {target:.0f} s | {cpu:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
