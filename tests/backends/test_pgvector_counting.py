"""Postings counted with numpy (``counting.py``) against a plain recount, and their binary
COPY stream read back field by field as PostgreSQL reads it."""

from __future__ import annotations

import random
import struct
from collections import Counter

from optional_extras import require_extra

require_extra("psycopg", "pgvector")

from lore.backends.pgvector.bm25 import FIELDS
from lore.backends.pgvector.counting import _A, _C, count

Expected = dict[tuple[str, int], tuple[tuple[int, ...], float]]


def _streams(seed: int, chunks: int) -> list[list[list[str]]]:
    words = ["", "etcd", "leader", "kube-apiserver", "é", "lag", "a" * 300, "x"]
    rng = random.Random(seed)
    return [[[rng.choice(words) for _ in range(rng.randrange(0, 12))] for _ in FIELDS] for _ in range(chunks)]


def _recount(streams: list[list[list[str]]], keys: list[int]) -> Expected:
    found: Expected = {}
    for fields, key in zip(streams, keys, strict=True):
        lengths = [len(terms) for terms in fields]
        for term in {term for terms in fields for term in terms if term}:
            tf = tuple(Counter(terms)[term] for terms in fields)
            impact = sum(t / (t + _A + c * n) for t, c, n in zip(tf, _C, lengths, strict=True))
            found[(term, key)] = (tf, impact)
    return found


def _read_copy(data: bytes) -> Expected:
    assert data.startswith(b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8)
    assert data.endswith(b"\xff\xff")
    at, found = 19, {}
    while at < len(data) - 2:
        (columns,) = struct.unpack_from(">h", data, at)
        assert columns == 2 + 2 * len(FIELDS) + 1
        at += 2
        values = []
        for _ in range(columns):
            (size,) = struct.unpack_from(">i", data, at)
            values.append(data[at + 4 : at + 4 + size])
            at += 4 + size
        term = values[0].decode()
        key = struct.unpack(">q", values[1])[0]
        tf = tuple(struct.unpack(">h", value)[0] for value in values[2 : 2 + len(FIELDS)])
        impact = struct.unpack(">f", values[-1])[0]
        found[(term, key)] = (tf, impact)
    return found


def test_counts_and_impacts_equal_a_plain_recount() -> None:
    streams = _streams(1, 40)
    keys = [1000 + 7 * i for i in range(40)]
    counted = count(streams, [[len(t) for t in fields] for fields in streams], keys)
    found = {
        (counted.vocabulary[term], int(key)): (tuple(tf.tolist()), float(impact))
        for term, key, tf, impact in zip(counted.terms, counted.keys, counted.tf, counted.impact, strict=True)
    }
    assert found == _recount(streams, keys)
    terms, frequencies = counted.frequencies()
    assert terms == sorted(terms)
    for number in range(len(FIELDS)):
        expected = Counter(term for fields in streams for term in set(fields[number]) if term)
        assert dict(zip(terms, frequencies[number], strict=True)) == {t: expected.get(t, 0) for t in terms}


def test_the_copy_stream_holds_every_posting() -> None:
    streams = _streams(2, 25)
    keys = list(range(25))
    expected = _recount(streams, keys)
    read = _read_copy(count(streams, [[len(t) for t in fields] for fields in streams], keys).copy_data())
    assert read.keys() == expected.keys()
    for posting, (tf, impact) in read.items():
        assert tf == expected[posting][0]
        assert impact == struct.unpack(">f", struct.pack(">f", expected[posting][1]))[0]  # float4


def test_chunks_without_terms_make_an_empty_stream() -> None:
    counted = count([[[], [""], [], []]], [[0, 1, 0, 0]], [5])
    assert len(counted.terms) == 0
    assert _read_copy(counted.copy_data()) == {}
    assert counted.frequencies() == ([], [[] for _ in FIELDS])
