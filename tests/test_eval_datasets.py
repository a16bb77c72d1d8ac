"""Reading BEIR datasets and golden sets, with clear errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lore.errors import DatasetError
from lore.eval.datasets import (
    BeirPaths,
    GoldenEntry,
    beir_doc_id,
    iter_beir_documents,
    load_beir_queries,
    load_golden_set,
    read_qrels,
    write_golden_set,
)
from lore.eval.metrics import Target


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Etcd quorum", "text": "etcd loses its leader when quorum is lost."},
        {"_id": "d2", "title": "", "text": "Kafka consumer lag grows when consumers stall."},
    ]
    queries = [
        {"_id": "q1", "text": "no etcd leader"},
        {"_id": "q2", "text": "lag"},
        {"_id": "q3", "text": "x"},
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td2\t1\nq3\td1\t0\n")
    return root


def test_beir_dataset(tmp_path: Path) -> None:
    paths = BeirPaths.from_directory(write_beir(tmp_path), "test")
    documents = list(iter_beir_documents(paths.corpus))
    assert [d.uri for d in documents] == ["beir://d1", "beir://d2"]
    assert documents[0].title == "Etcd quorum"
    assert documents[0].text == "etcd loses its leader when quorum is lost."
    assert beir_doc_id(documents[1].uri) == "d2"

    queries = load_beir_queries(paths)
    # q3 has only a grade-0 judgement: nothing relevant, so it is not evaluated.
    assert [(q.qid, q.text) for q in queries] == [("q1", "no etcd leader"), ("q2", "lag")]
    assert queries[0].targets == (Target("beir://d1", grade=2),)


def test_trec_style_four_column_qrels(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("1 0 docA 1\n1 0 docB 0\n")
    assert read_qrels(path) == {"1": {"docA": 1, "docB": 0}}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("corpus.jsonl", "{not json\n", "corpus.jsonl:1: not valid JSON"),
        ("corpus.jsonl", '{"title": "no id"}\n', "without an _id"),
        (
            "qrels/test.tsv",
            "query-id\tcorpus-id\tscore\nq1\td1\tyes\n",
            "test.tsv:2: score 'yes' is not an integer",
        ),
    ],
)
def test_bad_beir_files(tmp_path: Path, name: str, content: str, message: str) -> None:
    paths = BeirPaths.from_directory(write_beir(tmp_path), "test")
    (tmp_path / name).write_text(content)

    def read_all() -> None:
        list(iter_beir_documents(paths.corpus))
        load_beir_queries(paths)

    with pytest.raises(DatasetError, match=message):
        read_all()


def test_missing_beir_split(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"dev\.tsv"):
        BeirPaths.from_directory(write_beir(tmp_path), "dev")


def test_golden_set_yaml(tmp_path: Path) -> None:
    path = tmp_path / "golden.yaml"
    path.write_text(
        """
description: sample
questions:
  - id: etcd
    question: "etcd cluster has no leader"
    expected: file://runbooks/kubernetes/etcd-no-leader.md
  - question: kafka lag
    expected: [file://runbooks/data/, "file://runbooks/x*"]
    section: Diagnosis
  - question: "how do I rotate the HSM key?"
    expected: []
  - question: graded
    expected:
      - {uri: file://runbooks/a.md, section: Mitigation, grade: 2}
"""
    )
    queries = load_golden_set(path)
    assert [q.qid for q in queries] == ["etcd", "q2", "q3", "q4"]
    assert queries[0].targets == (Target("file://runbooks/kubernetes/etcd-no-leader.md"),)
    assert queries[1].targets == (
        Target("file://runbooks/data/", prefix=True, section="Diagnosis"),
        Target("file://runbooks/x", prefix=True, section="Diagnosis"),
    )
    assert not queries[2].answerable
    assert queries[3].targets == (Target("file://runbooks/a.md", grade=2, section="Mitigation"),)


def test_golden_set_jsonl_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "golden.jsonl"
    entries = [
        GoldenEntry.model_validate(
            {"question": "why is lag growing", "expected": ["file://a.md"], "chunk": "c1"}
        ),
        GoldenEntry.model_validate({"id": "none", "question": "unanswerable one", "expected": []}),
    ]
    write_golden_set(path, entries)
    assert json.loads(path.read_text().splitlines()[0])["chunk"] == "c1"
    queries = load_golden_set(path)
    assert [(q.qid, q.text, q.targets) for q in queries] == [
        ("q1", "why is lag growing", (Target("file://a.md"),)),
        ("none", "unanswerable one", ()),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- expected: file://a.md\n", "question 1: question: Field required"),
        ("- question: ''\n", "question 1: question"),
        ("just a string\n", "expected a list of questions"),
        ("- question: a\n  id: x\n- question: b\n  id: x\n", "duplicate id 'x'"),
        ("- question: a\n  expected: [{uri: u, colour: red}]\n", "question 1"),
        ("questions: [\n", "not valid YAML"),
        ("[]\n", "no questions"),
        # A misspelt key would make the question silently unanswerable.
        ("- question: a\n  expect: file://a.md\n", "unknown key 'expect' \\(did you mean 'expected'\\?\\)"),
        ("- question: a\n  answerabel: false\n", "did you mean 'answerable'"),
    ],
)
def test_bad_golden_sets(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "golden.yaml"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        load_golden_set(path)


def test_missing_golden_set(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="golden set not found"):
        load_golden_set(tmp_path / "nope.yaml")


def test_examples_golden_set_points_at_existing_runbooks(repo_root: Path) -> None:
    """eval/golden/examples.yaml is defended by CI: every expected uri must still exist."""
    queries = load_golden_set(repo_root / "eval" / "golden" / "examples.yaml")
    assert len(queries) >= 40
    assert sum(not query.answerable for query in queries) >= 3
    for query in queries:
        for target in query.targets:
            assert target.uri.startswith("file://runbooks/"), query.qid
            path = repo_root / "examples" / "runbooks" / target.uri.removeprefix("file://runbooks/")
            assert path.is_file(), (query.qid, target.uri)
