"""Import cost of lore's entry modules, this checkout against another's ``src``.

    .venv/bin/python bench/import_time.py --peer OTHER/src [--runs 9] [--modules lore.cli,lore.config]

Each run is a fresh ``python -X importtime -c "import lore.cli, lore.config, lore.resolve"``,
alternating the two source trees (which goes first alternates too); the table gives each
module's median cumulative import time (the module and everything it imported first) and
after/before. Bytecode is kept, as an installed lore runs from it. Microseconds of wall
time: on a loaded machine only the ratio within one run means much.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def cumulative(src: Path, modules: list[str]) -> dict[str, int]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env["PYTHONPATH"] = str(src)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = "import " + ", ".join(modules)
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, check=True
    ).stderr
    found = {}
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, total, name = (part.strip() for part in line[len("import time:") :].split("|"))
            if name in modules:
                found[name] = int(total)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, required=True, help="the other checkout's src folder (before)")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--modules", default="lore.cli,lore.config,lore.resolve")
    options = parser.parse_args()
    modules = [name.strip() for name in options.modules.split(",")]
    trees = {"before": options.peer.resolve(), "after": REPO_ROOT / "src"}
    samples: dict[tuple[str, str], list[int]] = {}
    for run in range(options.runs):
        order = list(trees.items()) if run % 2 == 0 else list(reversed(trees.items()))
        for side, src in order:
            for module, micros in cumulative(src, modules).items():
                samples.setdefault((side, module), []).append(micros)
    print(
        f"{'module':16} {'before us':>10} {'after us':>10} {'after/before':>12}   (medians of {options.runs})"
    )
    for module in modules:
        before = statistics.median(samples.get(("before", module), [0]))
        after = statistics.median(samples.get(("after", module), [0]))
        ratio = after / before if before else float("nan")
        print(f"{module:16} {before:10.0f} {after:10.0f} {ratio:12.2f}")
    print(
        "load average " + " ".join(f"{value:.1f}" for value in os.getloadavg()) + f" on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
