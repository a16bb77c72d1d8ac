"""Postings counted from token streams and laid out as a binary COPY stream, with numpy.

A write's postings are one row per (term, chunk) (``bm25.py``), about 140 for a
runbook-sized chunk, so anything done per posting in Python dominates a write: measured
at 10k synthetic chunks, an ``INSERT ... SELECT`` that counted them on the server spent
about 12 us of server CPU per posting (binary COPY of the same rows: under 2), and
counting and sending them row by row through ``Copy.write_row`` cost the client more
than the analysis itself. Here the only Python loop is over tokens, mapping each to a
number; counting, the impacts and the COPY rows are whole-array operations.

The COPY layout is PostgreSQL's binary format (``COPY ... FROM STDIN (FORMAT BINARY)``):
a signature, then per row a field count and each field as its length and its bytes in
network order, then a trailer of -1.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lore.backends.pgvector.bm25 import FIELDS, K1, REFERENCE_LENGTHS, B

#: Counts and lengths are smallint columns.
SMALLINT_MAX = 32_767
_FIELDS = len(FIELDS)

#: ``impact`` of a posting: the sum over fields of ``tf / (tf + A + C_f * len_f)``, a
#: length-normalised term frequency against ``REFERENCE_LENGTHS``: the order of a term's
#: postings in its index (scores use the live averages).
_A = K1 * (1.0 - B)
_C = tuple(K1 * B / REFERENCE_LENGTHS[name] for name in FIELDS)

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8  # no flags, no header extension
_TRAILER = b"\xff\xff"
_HEAD = struct.Struct(">hi")
#: Every field of a posting row after its term, in ``COPY_POSTINGS`` column order, each
#: preceded by its length: the chunk key, the term frequencies and lengths, the impact.
_FIXED = np.dtype(
    [
        ("key_size", ">i4"),
        ("key", ">i8"),
        *((f"{kind}_{name}_{part}", fmt) for kind in ("tf", "len") for name in FIELDS
          for part, fmt in (("size", ">i4"), ("value", ">i2"))),
        ("impact_size", ">i4"),
        ("impact", ">f4"),
    ]
)
#: Columns of a posting row: the term, then the fixed ones.
_COLUMNS = 2 + 2 * _FIELDS + 1


@dataclass(frozen=True, slots=True)
class Counted:
    """The postings of a write: one row per (term, chunk)."""

    vocabulary: list[str]
    #: Per posting: its term (an index into ``vocabulary``), chunk key, term frequency
    #: and chunk length per field, impact.
    terms: npt.NDArray[np.int64]
    keys: npt.NDArray[np.int64]
    tf: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    impact: npt.NDArray[np.float64]

    def frequencies(self) -> tuple[list[str], list[list[int]]]:
        """The terms of the write, sorted, and per field how many of its chunks hold each."""
        order = sorted(set(self.terms.tolist()), key=self.vocabulary.__getitem__)
        columns = []
        for number in range(_FIELDS):
            counts = np.bincount(self.terms[self.tf[:, number] > 0], minlength=len(self.vocabulary))
            columns.append(counts[order].tolist())
        return [self.vocabulary[i] for i in order], columns

    def copy_data(self) -> bytes:
        """The rows in PostgreSQL's binary COPY format, signature and trailer included.

        Each row is its term's head (field count, term length, term bytes: made once per
        distinct term) then its fixed fields, laid out by whole-array assignments: no
        Python object is made per row (joining per-row pieces cost about as much as
        counting the postings)."""
        size = _FIXED.itemsize
        fixed = np.zeros(len(self.terms), dtype=_FIXED)
        fixed["key_size"] = 8
        fixed["key"] = self.keys
        for number, name in enumerate(FIELDS):
            for kind, values in (("tf", self.tf), ("len", self.lengths)):
                fixed[f"{kind}_{name}_size"] = 2
                fixed[f"{kind}_{name}_value"] = values[:, number]
        fixed["impact_size"] = 4
        fixed["impact"] = self.impact
        heads = [_HEAD.pack(_COLUMNS, len(term)) + term for term in (t.encode() for t in self.vocabulary)]
        head_sizes = np.fromiter(map(len, heads), np.int64, len(heads))
        # Rows go out grouped by the size of their term's head (the order of a COPY's rows
        # means nothing), so each group is one array of fixed-size records.
        row_sizes = head_sizes[self.terms]
        records = fixed.view(f"V{size}")
        place = np.zeros(len(heads), dtype=np.int64)
        pieces = [_SIGNATURE]
        for head_size in np.unique(row_sizes).tolist():
            same = np.flatnonzero(head_sizes == head_size)
            place[same] = np.arange(len(same))
            table = np.frombuffer(b"".join(heads[i] for i in same.tolist()), dtype=f"V{head_size}")
            chosen = row_sizes == head_size
            group = np.empty(int(chosen.sum()), dtype=[("head", f"V{head_size}"), ("fixed", f"V{size}")])
            group["head"] = table[place[self.terms[chosen]]]
            group["fixed"] = records[chosen]
            pieces.append(group.tobytes())
        pieces.append(_TRAILER)
        return b"".join(pieces)


def count(
    streams: Sequence[Sequence[Sequence[str]]], lengths: Sequence[Sequence[int]], keys: Sequence[int]
) -> Counted:
    """Postings of chunks given, per chunk, a token stream per field (``FIELDS`` order),
    its field lengths and its chunk key. An empty token is no term."""
    tokens_in_order: list[str] = []
    sizes: list[int] = []
    for fields in streams:
        for terms in fields:
            tokens_in_order.extend(terms)
            sizes.append(len(terms))
    # Numbered in order of first appearance, the empty token first (as 0, no term).
    vocabulary = {term: number for number, term in enumerate(dict.fromkeys(["", *tokens_in_order]))}
    width = len(vocabulary)
    numbers = map(vocabulary.__getitem__, tokens_in_order)
    tokens = np.fromiter(numbers, dtype=np.int64, count=len(tokens_in_order))
    slot = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)  # chunk * _FIELDS + field
    code = ((slot // _FIELDS) * width + tokens) * _FIELDS + slot % _FIELDS
    unique, counts = np.unique(code[tokens != 0], return_counts=True)
    pairs, position = np.unique(unique // _FIELDS, return_inverse=True)  # chunk * width + term
    tf = np.zeros((len(pairs), _FIELDS), dtype=np.int64)
    tf[position, unique % _FIELDS] = np.minimum(counts, SMALLINT_MAX)
    chunk = pairs // width
    chunk_lengths = np.minimum(np.asarray(lengths, dtype=np.int64).reshape(-1, _FIELDS), SMALLINT_MAX)[chunk]
    impact = np.zeros(len(pairs), dtype=np.float64)
    for number in range(_FIELDS):
        frequency = tf[:, number].astype(np.float64)
        impact += frequency / (frequency + _A + _C[number] * chunk_lengths[:, number])
    return Counted(
        vocabulary=list(vocabulary),
        terms=pairs % width,
        keys=np.asarray(keys, dtype=np.int64)[chunk],
        tf=tf,
        lengths=chunk_lengths,
        impact=impact,
    )
