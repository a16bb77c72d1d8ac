"""Secret detectors compared on labelled cases none of lore's authors wrote.

Labelled data (read from paths given on the command line; skipped when absent, never
copied into this repository):

- Kingfisher's rules (``data/rules/*.yml`` of github.com/mongodb/kingfisher): each rule's
  ``examples`` (must be found) and ``negative_examples`` (must not);
- gitleaks' rule tests (``cmd/generate/config/rules/*.go`` of github.com/gitleaks/gitleaks):
  the literal strings of each rule's ``tps`` (true positives) and ``fps`` (false
  positives); samples generated at run time by gitleaks' helpers are not literals and are
  left out;
- the shared runbook corpora (../shared/corpora): every passage is a negative unless a
  human says otherwise, so the share of passages a detector flags there is its false-alarm
  rate on the text lore actually holds (flagged passages are listed for judging).

A case counts as found when the detector reports anything in it. Detectors, each alone
and beside lore (found by either):

- ``lore``: ``SecretRedactor`` as sync runs it (detect-secrets' vendor regexes, lore's
  vendor table, the credential-context grammar, prose);
- ``detect-secrets``: Yelp's scanner with its default plugins, line by line;
- ``bc-detect-secrets``: Bridgecrew's fork (same module name: run this script with a
  Python that has it instead, ``--only bc-detect-secrets``);
- ``credsweeper``: Samsung's rules with its bundled ML validator (onnxruntime);
- ``betterleaks``: the gitleaks successor's rules, in process through its bindings;
- ``kingfisher``: MongoDB's packaged binary, one process over a folder of all the cases.

CPU per passage is process CPU time over the cases, divided by their number (Kingfisher:
the child process's CPU for the whole folder, so its start-up is shared by every case;
per document, as a redactor would run it, each call would pay that start-up again).

    git -C <kingfisher checkout> archive HEAD data/rules | tar -x -C build/ext/kingfisher
    git -C <gitleaks checkout> archive HEAD cmd/generate/config/rules | tar -x -C build/ext/gitleaks
    PYTHONPATH=src python bench/secret_detectors.py --kingfisher build/ext/kingfisher \\
        --gitleaks build/ext/gitleaks [--corpus-passages 3000] [--only lore,credsweeper]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: ../shared/corpora beside the checkout (a worktree elsewhere passes ``--corpora``).
SHARED_CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


@dataclass(frozen=True)
class Case:
    source: str
    text: str
    #: True: holds a secret; False: must pass unflagged.
    secret: bool


# -- labelled data -----------------------------------------------------------------------


def kingfisher_cases(root: Path) -> Iterator[Case]:
    import yaml

    for path in sorted((root / "data" / "rules").glob("*.y*ml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        for rule in (data or {}).get("rules", []) or []:
            for text in rule.get("examples") or []:
                if isinstance(text, str) and text.strip():
                    yield Case("kingfisher", text, True)
            for text in rule.get("negative_examples") or []:
                if isinstance(text, str) and text.strip():
                    yield Case("kingfisher", text, False)


_GO_TOKEN = re.compile(r'`[^`]*`|"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/|[(){}\[\],:+]|[A-Za-z_][\w.]*', re.S)


def _go_string(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return str(json.loads(token.replace("\\'", "'"))) if "\\x" not in token else token[1:-1]


def gitleaks_cases(root: Path) -> Iterator[Case]:
    """The string literals that are whole elements of a rule's ``tps``/``fps`` lists
    (``[]string{…}``, ``map[string]string{…}`` values, ``append(tps, …)``)."""
    for path in sorted((root / "cmd" / "generate" / "config" / "rules").glob("*.go")):
        tokens = [t for t in _GO_TOKEN.findall(path.read_text(encoding="utf-8")) if not t.startswith("/")]
        # a stack of open brackets, each with the list it fills (tps / fps) or None
        stack: list[str | None] = []
        statement: list[str] = []
        for i, token in enumerate(tokens):
            if token in "({[":
                label = None
                recent = statement[-6:]
                target = next((t for t in ("tps", "fps") if t in recent), None)
                if (token == "{" and target and ("string" in recent or "]" in recent)) or (
                    token == "(" and i > 0 and tokens[i - 1] == "append" and target
                ):
                    label = target
                stack.append(label)
                statement.append(token)
                continue
            if token in ")}]":
                if stack:
                    stack.pop()
                statement.append(token)
                continue
            if token[0] in '`"' and stack and stack[-1] is not None:
                before, after = tokens[i - 1], tokens[i + 1] if i + 1 < len(tokens) else ""
                if before in ("{", ",", "(", ":") and after in (",", "}", ")") and before != "+":
                    if after == ":" or (before == "(" and stack[-1] is None):
                        continue
                    try:
                        text = _go_string(token)
                    except ValueError:
                        continue
                    if text.strip() and not (before == "(" and tokens[i - 2] == "append"):
                        yield Case("gitleaks", text, stack[-1] == "tps")
                continue
            if token == "tps" or token == "fps":
                statement = [token]
            else:
                statement.append(token)


def corpus_passages(root: Path, limit: int) -> list[Case]:
    if not root.is_dir():
        return []
    from lore.chunking import Chunker
    from lore.models import Document

    chunker = Chunker()
    cases: list[Case] = []
    for path in sorted(root.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        document = Document(f"file://{path}", path.stem, text, "r1", None)
        cases += [Case(f"corpora/{path.relative_to(root).parts[0]}", c.text, False)
                  for c in chunker.chunk(document)]  # fmt: skip
    step = max(1, len(cases) // limit) if limit else 1
    return cases[::step][:limit] if limit else cases


# -- detectors ---------------------------------------------------------------------------

#: A detector: the cases in, one verdict per case out (flagged or not).
Detector = Callable[[list[Case]], list[bool]]


def lore_detector() -> Detector:
    from lore.safety.secrets import SecretRedactor

    redactor = SecretRedactor()
    return lambda cases: [bool(redactor.redact(case.text)[1]) for case in cases]


def detect_secrets_detector() -> Detector:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    def run(cases: list[Case]) -> list[bool]:
        with default_settings():
            return [any(True for line in case.text.splitlines() for _ in scan_line(line)) for case in cases]

    return run


def credsweeper_detector() -> Detector:
    from credsweeper.app import CredSweeper
    from credsweeper.file_handler.string_content_provider import StringContentProvider

    sweeper = CredSweeper()

    def one(text: str) -> bool:
        lines = text.splitlines()
        candidates = sweeper.file_scan(StringContentProvider(lines, file_path="passage.md"))
        sweeper.credential_manager.set_credentials(candidates)
        sweeper.post_processing(None)
        return bool(sweeper.credential_manager.get_credentials())

    return lambda cases: [one(case.text) for case in cases]


def betterleaks_detector() -> Detector:
    import betterleaks

    return lambda cases: [bool(betterleaks.scan_string(case.text)) for case in cases]


def kingfisher_detector() -> Detector:
    import kingfisher

    binary = Path(kingfisher.__file__).parent / "bin" / "kingfisher"

    def run(cases: list[Case]) -> list[bool]:
        folder = Path(tempfile.mkdtemp(prefix="kingfisher-cases-"))
        try:
            for i, case in enumerate(cases):
                (folder / f"{i}.txt").write_text(case.text + "\n", encoding="utf-8")
            completed = subprocess.run(
                [str(binary), "scan", str(folder), "--no-validate", "--no-dedup", "--format", "json", "-q"],
                capture_output=True, text=True, check=False, env={**os.environ, "NO_COLOR": "1"},
            )  # fmt: skip
            report = json.loads(completed.stdout[completed.stdout.index("{") :])
            flagged = {Path(f["finding"]["path"]).stem for f in report.get("findings", [])}
            return [str(i) in flagged for i in range(len(cases))]
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return run


DETECTORS: dict[str, Callable[[], Detector]] = {
    "lore": lore_detector,
    "detect-secrets": detect_secrets_detector,
    "bc-detect-secrets": detect_secrets_detector,
    "credsweeper": credsweeper_detector,
    "betterleaks": betterleaks_detector,
    "kingfisher": kingfisher_detector,
}


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _lore_worker_cpu()


def _lore_worker_cpu() -> float:
    """The CPU of lore's secret-detector worker process (Betterleaks runs there for lore;
    it is never reaped during the run, so ``RUSAGE_CHILDREN`` does not hold it)."""
    try:
        from lore.safety.secret_detector import shared_process
    except ImportError:
        return 0.0
    return shared_process().cpu_seconds()


@dataclass
class Measured:
    name: str
    verdicts: list[bool]
    cpu_seconds: float
    error: str | None = None
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)


def measure(name: str, cases: list[Case], python: str | None = None) -> Measured:
    if python:
        return _measure_elsewhere(name, cases, python)
    try:
        detector = DETECTORS[name]()
        detector(cases[:5])  # warm: load rules, models, the shared library
    except Exception as err:
        return Measured(name, [], 0.0, f"{type(err).__name__}: {err}")
    started = _cpu()
    verdicts = detector(cases)
    return Measured(name, verdicts, _cpu() - started)


def _measure_elsewhere(name: str, cases: list[Case], python: str) -> Measured:
    """The detector in another interpreter (its own venv: bc-detect-secrets and
    detect-secrets share a module name; the scanners need not be in lore's)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as out:
        json.dump([case.text for case in cases], out)
    try:
        completed = subprocess.run(
            [python, __file__, "--worker", name, "--cases-file", out.name],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        os.unlink(out.name)
    if completed.returncode != 0:
        return Measured(name, [], 0.0, completed.stderr.strip().splitlines()[-1][:200])
    result = json.loads(completed.stdout.splitlines()[-1])
    return Measured(name, result["verdicts"], result["cpu_seconds"], result.get("error"))


def worker(name: str, cases_file: Path) -> None:
    texts = json.loads(cases_file.read_text(encoding="utf-8"))
    result = measure(name, [Case("worker", text, False) for text in texts])
    print(json.dumps({"verdicts": result.verdicts, "cpu_seconds": result.cpu_seconds, "error": result.error}))


def rate(verdicts: list[bool], cases: list[Case], source: str, secret: bool) -> tuple[int, int]:
    picked = [
        v for v, c in zip(verdicts, cases, strict=True) if c.source.startswith(source) and c.secret == secret
    ]
    return sum(picked), len(picked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kingfisher", type=Path, help="a checkout (or archive) of Kingfisher's data/rules")
    parser.add_argument("--gitleaks", type=Path, help="a checkout of gitleaks' cmd/generate/config/rules")
    parser.add_argument("--corpora", type=Path, default=SHARED_CORPORA, help="the shared runbook corpora")
    parser.add_argument(
        "--corpus-passages", type=int, default=3000, help="passages of the shared corpora (0: all)"
    )
    parser.add_argument("--only", default=",".join(DETECTORS), help="comma-separated detectors")
    parser.add_argument("--json", type=Path, help="write the verdicts here too")
    parser.add_argument("--list-flagged", type=int, default=5, help="corpus passages listed per detector")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="DETECTOR=PYTHON",
        help="run a detector in another interpreter (its own venv)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cases-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.cases_file)
        return
    pythons = dict(item.split("=", 1) for item in args.python)

    cases: list[Case] = []
    for source, path, load in (("kingfisher", args.kingfisher, kingfisher_cases),
                               ("gitleaks", args.gitleaks, gitleaks_cases)):  # fmt: skip
        if path is None or not path.is_dir():
            print(f"skipped {source}: no path given or not a folder", file=sys.stderr)
            continue
        cases += list(load(path))
    corpus = corpus_passages(args.corpora, args.corpus_passages)
    if not corpus:
        print(f"skipped the shared corpora: {args.corpora} is absent", file=sys.stderr)
    cases += corpus
    if not cases:
        print("nothing to measure", file=sys.stderr)
        raise SystemExit(2)

    results = {name: measure(name, cases, pythons.get(name)) for name in args.only.split(",")}
    lore = results.get("lore")
    header = ("detector", "kingfisher recall", "kingfisher FP", "gitleaks recall", "gitleaks FP",
              "corpora flagged", "CPU ms/passage")  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows: list[tuple[str, list[bool], float | None]] = []
    for name, result in results.items():
        if result.error:
            print(f"| {name} | {result.error} |")
            continue
        rows.append((name, result.verdicts, 1000 * result.cpu_seconds / len(cases)))
        if lore and not lore.error and name != "lore":
            union = [a or b for a, b in zip(lore.verdicts, result.verdicts, strict=True)]
            rows.append((f"lore + {name}", union, None))
    for name, verdicts, cpu in rows:
        cells = [name]
        for source in ("kingfisher", "gitleaks"):
            found, total = rate(verdicts, cases, source, True)
            false, negatives = rate(verdicts, cases, source, False)
            cells.append(f"{found}/{total} ({100 * found / total:.1f} %)" if total else "-")
            cells.append(f"{false}/{negatives}" if negatives else "-")
        flagged, passages = rate(verdicts, cases, "corpora", False)
        cells.append(f"{flagged}/{passages} ({100 * flagged / passages:.2f} %)" if passages else "-")
        cells.append(f"{cpu:.3f}" if cpu is not None else "")
        print("| " + " | ".join(cells) + " |")

    for name, result in results.items():
        if result.error:
            continue
        flagged_texts = [
            c.text
            for v, c in zip(result.verdicts, cases, strict=True)
            if v and c.source.startswith("corpora")
        ]
        if flagged_texts and args.list_flagged:
            print(f"\n{name}: corpus passages flagged (first {args.list_flagged}):")
            for text in flagged_texts[: args.list_flagged]:
                line = next((ln for ln in text.splitlines() if ln.strip()), "")[:160]
                print(f"  - {line}")
    if args.json:
        args.json.write_text(json.dumps({name: r.verdicts for name, r in results.items()}), encoding="utf-8")
    print(f"\n{len(cases)} cases; measured {time.strftime('%Y-%m-%d')}", file=sys.stderr)


if __name__ == "__main__":
    main()
