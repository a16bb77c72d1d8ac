"""What the harness evaluates: BEIR benchmarks and golden sets, read into ``EvalQuery``.

BEIR layout: ``corpus.jsonl`` (``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id corpus-id score``). A corpus
document becomes a lore ``Document`` with uri ``beir://<_id>``.

Golden set (YAML or JSONL), one entry per question::

    - question: "etcd cluster has no leader, writes time out"
      expected: file://runbooks/etcd/no-leader.md          # one uri ...
    - question: "consumer lag on payments keeps growing"
      expected: [file://runbooks/kafka/, {uri: file://runbooks/x.md, section: Diagnosis}]
    - question: "how do I rotate the HSM master key?"
      answerable: false                                     # no answer in the corpus
      split: holdout                                        # optional: calibration / holdout

``expected`` entries are uris; one ending in ``/`` or ``*`` is a prefix (the ``*`` is
dropped). A YAML file may also be a mapping with a ``questions`` list (and any other
keys, e.g. a description).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lore.errors import DatasetError
from lore.eval.metrics import RELEVANT_GRADE, Target
from lore.models import Document, SourceItem, Visibility, sha256_hex

BEIR_URI_PREFIX = "beir://"
#: BEIR documents have no date; a fixed one keeps revisions and runs reproducible.
_BEIR_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EvalQuery:
    """One question and what should answer it; no targets means no answer exists."""

    qid: str
    text: str
    targets: tuple[Target, ...]
    #: ``calibration`` or ``holdout`` (``split_of``): which half fits ``lore.confidence``
    #: and which half its reported figures come from.
    split: str = "holdout"

    @property
    def answerable(self) -> bool:
        return any(target.grade >= RELEVANT_GRADE for target in self.targets)


#: The halves of a golden set: ``lore.confidence`` is fitted on the first, reported on the second.
SPLITS = ("calibration", "holdout")


def split_of(qid: str) -> str:
    """A question's half when its entry names none: by a hash of its id, so the split is
    fixed, needs no bookkeeping, and a new question does not move the old ones."""
    return SPLITS[int(sha256_hex(qid)[:8], 16) % 2]


# -- BEIR -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeirPaths:
    corpus: Path
    queries: Path
    qrels: Path

    @classmethod
    def from_directory(cls, directory: Path, split: str) -> BeirPaths:
        paths = cls(
            directory / "corpus.jsonl", directory / "queries.jsonl", directory / "qrels" / f"{split}.tsv"
        )
        paths.check()
        return paths

    def check(self) -> None:
        for path in (self.corpus, self.queries, self.qrels):
            if not path.is_file():
                raise DatasetError(f"BEIR dataset file not found: {path}")


def beir_uri(doc_id: str) -> str:
    return f"{BEIR_URI_PREFIX}{doc_id}"


def beir_doc_id(uri: str) -> str:
    """The qrels' document id back from a uri (run files use the qrels' ids)."""
    return uri.removeprefix(BEIR_URI_PREFIX)


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise DatasetError(f"{path}:{number}: not valid JSON: {err.msg}") from err
                if not isinstance(record, dict):
                    raise DatasetError(f"{path}:{number}: expected a JSON object")
                yield number, record
    except OSError as err:
        raise DatasetError(f"cannot read {path}: {err}") from err


def iter_beir_documents(corpus: Path) -> Iterator[Document]:
    for number, record in _jsonl(corpus):
        doc_id = record.get("_id")
        if doc_id is None:
            raise DatasetError(f"{corpus}:{number}: document without an _id")
        text = str(record.get("text") or "")
        title = str(record.get("title") or "")
        yield Document(
            uri=beir_uri(str(doc_id)),
            title=title,
            text=text,
            revision=sha256_hex(f"{title}\n{text}")[:16],
            updated_at=_BEIR_EPOCH,
            media_type="text/plain",
        )


class BeirSource:
    """A BEIR corpus as a ``KnowledgeSource``, so ``lore.sync`` indexes it like any other."""

    source_type = "beir"
    incremental = False
    visibility = Visibility.ALL_VIEWERS

    def __init__(self, corpus: Path, name: str = "beir") -> None:
        self.name = name
        self.corpus = corpus

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        for document in iter_beir_documents(self.corpus):
            yield document

    def resume_token(self) -> str | None:
        return None

    def count(self) -> int:
        """Documents in the corpus (one per non-blank line), for progress bars."""
        with self.corpus.open(encoding="utf-8") as lines:
            return sum(1 for line in lines if line.strip())


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: grade}}`` from BEIR (``qid docid score``, tab-separated, with a
    header) or TREC (``qid 0 docid rel``, space-separated) qrels."""
    qrels: dict[str, dict[str, int]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DatasetError(f"cannot read {path}: {err}") from err
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) == 4:
            fields = [fields[0], fields[2], fields[3]]
        if len(fields) != 3:
            raise DatasetError(f"{path}:{number}: expected 'query-id corpus-id score'")
        qid, doc_id, grade = fields
        try:
            qrels.setdefault(qid, {})[doc_id] = int(grade)
        except ValueError as err:
            if number == 1:  # the header
                qrels.pop(qid, None)
                continue
            raise DatasetError(f"{path}:{number}: score {grade!r} is not an integer") from err
    return qrels


def load_beir_queries(paths: BeirPaths) -> list[EvalQuery]:
    """Queries that have at least one relevant judgement, in ``queries.jsonl`` order."""
    qrels = read_qrels(paths.qrels)
    queries: list[EvalQuery] = []
    for _, record in _jsonl(paths.queries):
        qid = str(record.get("_id", ""))
        judged = qrels.get(qid)
        if not judged:
            continue
        targets = tuple(Target(uri=beir_uri(doc_id), grade=grade) for doc_id, grade in judged.items())
        query = EvalQuery(qid=qid, text=str(record.get("text", "")), targets=targets)
        if query.answerable:
            queries.append(query)
    if not queries:
        raise DatasetError(f"no query in {paths.queries} has a relevant judgement in {paths.qrels}")
    return queries


# -- golden sets ------------------------------------------------------------------------


class _Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uri: str = Field(min_length=1)
    section: str | None = None
    grade: int = Field(default=1, ge=0)
    prefix: bool = False


class GoldenEntry(BaseModel):
    """One question as written in a golden-set file."""

    model_config = ConfigDict(extra="allow")

    id: str | None = None
    question: str = Field(min_length=1)
    expected: list[str | _Expected] = Field(default_factory=list)
    #: Applies to every plain-string entry of ``expected``.
    section: str | None = None
    #: ``false`` marks a question the corpus cannot answer (``expected`` must then be
    #: empty); an empty ``expected`` alone means the same.
    answerable: bool | None = None
    split: Literal["calibration", "holdout"] | None = None

    @field_validator("expected", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if value is None:
            return []
        return [value] if isinstance(value, (str, dict)) else value

    def targets(self) -> tuple[Target, ...]:
        targets: list[Target] = []
        for item in self.expected:
            spec = item if isinstance(item, _Expected) else _Expected(uri=item, section=self.section)
            uri, prefix = spec.uri, spec.prefix
            if uri.endswith("*"):
                uri, prefix = uri.rstrip("*"), True
            elif uri.endswith("/"):
                prefix = True
            targets.append(Target(uri=uri, grade=spec.grade, prefix=prefix, section=spec.section))
        return tuple(targets)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's message quotes the input over several lines with a caret under it; the
    problem and its line and column say the same on one."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(err)


def _golden_records(path: Path) -> list[Any]:
    if path.suffix.lower() == ".jsonl":
        return [record for _, record in _jsonl(path)]
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise DatasetError(f"cannot read {path}: {err}") from err
    except yaml.YAMLError as err:
        raise DatasetError(f"{path}: not valid YAML: {_yaml_problem(err)}") from err
    if isinstance(loaded, dict):
        loaded = loaded.get("questions")
    if not isinstance(loaded, list):
        raise DatasetError(f"{path}: expected a list of questions (or a mapping with 'questions')")
    return loaded


def _refuse_misspelt_keys(path: Path, number: int, entry: GoldenEntry) -> None:
    """Other keys (a note, an owner) are kept, but one a letter or two from a known key is
    refused: a misspelt ``expect:`` would otherwise turn the question into one the corpus
    cannot answer, and the set would score nothing for it without a word."""
    known = sorted(GoldenEntry.model_fields)
    for key in entry.model_extra or {}:
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
        if close:
            raise DatasetError(f"{path}: question {number}: unknown key {key!r} (did you mean {close[0]!r}?)")


def load_golden_set(path: Path) -> list[EvalQuery]:
    """Questions from a YAML (``.yaml``/``.yml``) or JSON Lines (``.jsonl``) golden set."""
    if not path.is_file():
        raise DatasetError(f"golden set not found: {path}")
    queries: list[EvalQuery] = []
    seen: set[str] = set()
    for number, record in enumerate(_golden_records(path), start=1):
        try:
            entry = GoldenEntry.model_validate(record)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in err.errors()
            )
            raise DatasetError(f"{path}: question {number}: {problems}") from err
        qid = entry.id or f"q{number}"
        _refuse_misspelt_keys(path, number, entry)
        if entry.answerable is False and entry.expected:
            raise DatasetError(f"{path}: question {number}: answerable: false, yet expected names answers")
        if entry.answerable and not entry.expected:
            raise DatasetError(f"{path}: question {number}: answerable: true needs expected answers")
        if qid in seen:
            raise DatasetError(f"{path}: question {number}: duplicate id {qid!r}")
        seen.add(qid)
        split = entry.split or split_of(qid)
        queries.append(EvalQuery(qid=qid, text=entry.question.strip(), targets=entry.targets(), split=split))
    if not queries:
        raise DatasetError(f"{path}: no questions")
    return queries


def write_golden_set(path: Path, entries: Sequence[GoldenEntry]) -> None:
    """Write entries as JSON Lines or YAML, chosen by the file's suffix."""
    records = [entry.model_dump(exclude_none=True, exclude_defaults=False) for entry in entries]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".jsonl":
        text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    else:
        text = yaml.safe_dump(records, sort_keys=False, allow_unicode=True, width=100)
    path.write_text(text, encoding="utf-8")
