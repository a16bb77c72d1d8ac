"""The vector matrix's label and access postings: ``_add_postings`` keeps, for each term,
the positions of the appended rows that carry it, once each and ascending, whatever order
and repetition the rowids arrive in (its dedup avoids np.unique, which imports numpy.ma)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lore.backends.sqlite.vector_matrix import _add_postings


@given(
    appended=st.lists(st.integers(1, 400), max_size=60, unique=True).map(sorted),
    members=st.dictionaries(st.sampled_from(["env:prod", "team:db", "group:sre"]),
                            st.lists(st.integers(1, 450), max_size=80), max_size=3),
    start=st.integers(0, 1000),
    held=st.booleans(),
)
def test_each_term_gets_the_positions_of_its_appended_rows_once_and_in_order(
    appended: list[int], members: dict[str, list[int]], start: int, held: bool,
) -> None:
    new_rowids = np.asarray(appended, dtype=np.int64)
    earlier = np.asarray([0], dtype=np.int64) if held else None
    postings = {term: earlier for term in members} if earlier is not None else {}

    _add_postings(postings, members, new_rowids, start)  # type: ignore[arg-type]

    position = {rowid: index + start for index, rowid in enumerate(appended)}
    for term, rowids in members.items():
        expected = sorted({position[rowid] for rowid in rowids if rowid in position})
        prefix = [0] if held else []
        assert postings[term].tolist() == prefix + expected
        assert postings[term].dtype == np.int64
