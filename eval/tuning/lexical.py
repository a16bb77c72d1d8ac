"""The BM25 channel's fields and query analysis, measured on one existing SQLite index.

    .venv/bin/python eval/tuning/lexical.py --index F --beir ../shared/benchmarks/scifact --split train
    .venv/bin/python eval/tuning/lexical.py --index F --golden eval/golden/alerts-gitlab.yaml

Nothing is re-embedded and the index is only read: each variant builds its own tantivy
index of the same chunks (read from SQLite) in a temporary directory, searches it 200
deep per query, and is scored alone and fused by min-max with the index's own vector
channel (as ``lore eval`` does). The ``current`` variant is the backend's analysis
(``lore.backends.fulltext_analysis``), so its rows must equal the backend's; ``v4: a
field per part`` is the layout before full-text version 5 (the rows recorded as
``current`` in docs/quality.md before that).

The backend scores a query term once per field it is looked up in, and sums: a word of
the title scores in ``title`` and again in ``ident`` (which holds the whole text
unstemmed), a word of the body in ``body`` and ``ident``. Each field has its own length
normalisation and idf, so a short field (a title, a file name) matched by a common word
can outweigh a body that holds the query's rare words. The variants:

- ``flat``: one English field holding title, section, body and path (a document field
  as BM25 was defined on), plus ``ident``; ``flat, no ident``: that field alone;
- ``flat + title/path at w``: the flat field and ``ident``, with the title and path
  fields searched beside it at weight ``w`` (a runbook's name is evidence of its own);
  ``flat + path at 1``: the path alone beside it (a file name is a name, while a title
  may be a sentence, as SciFact's are);
- ``bm25f: title/path xw``: one document field in which the title and path count ``w``
  times (BM25F's field weights: term frequency and length weighted alike, so a name
  counts for more without a short field's length normalisation of its own);
- ``current, no ident``: the backend's English fields without ``ident``;
- ``..., ident for identifiers only``: only the query's identifier-shaped tokens
  (``lexical``'s rule: a joiner, a CamelCase joint, letters with digits) are looked up in
  ``ident``, so a plain word is not counted a second time in its unstemmed form;
- ``dismax:t``: the current fields, but each query word scores its best English field
  plus ``t`` times the others (tantivy's disjunction max), instead of their sum;
- ``flat + named title/path at w``: the flat field, with the title and path beside it at
  weight ``w`` only where they are a *name* (``title_is_name``, ``path_is_name``: few
  words, no sentence ending); a sentence title is in the flat field only;
- ``current, plain words' exact form at w``: every ``ident`` term searched, an identifier
  at the field's boost, a plain word at ``w`` of it (``current`` is the backend's ``w``,
  ``fulltext_analysis.PLAIN_EXACT_FORM``; ``v5: ...`` every term at 1, the rule before).

``--verbatim`` adds, per variant, the hybrid with a lexical lean on copied queries only
(``copied``: the query shares a run of ``COPIED_RUN_WORDS`` (8) words with BM25's best chunk), and
prints how often it fires. Each run prints how the rule classifies each source's titles.

Results in docs/quality.md ("Confidence-weighted fusion and the BM25 channel's fields",
"A document's name by its shape, and copied queries", "A plain word's exact form").
"""

from __future__ import annotations

import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tantivy

sys.path.insert(0, str(Path(__file__).parent))

from levers import EVEN
from sweep import EVAL_TOP_K, Channels, Hit, parsed_queries, query_parser, single, table

from lore.backends import lexical as lex
from lore.backends.fulltext_analysis import (
    IDENT,
    IDENT_PATTERN,
    PLAIN_EXACT_FORM,
    STEMMED,
    analyzers,
    field_texts,
    ident_weights,
    query_terms,
    with_identifier_words,
)
from lore.eval.datasets import EvalQuery
from lore.fusion import normalized_score_fusion, word_runs
from lore.models import SECTION_SEPARATOR

ENGLISH = ("title", "section", "body", "path")
#: Integer field weights of the title and path inside one document field: BM25F
#: (Robertson, Zaragoza & Taylor, CIKM 2004) with the weight applied to term frequency and
#: length alike, which is what repeating the text that many times does.
BM25F_WEIGHTS = (2, 3, 5)


@dataclass(frozen=True)
class Variant:
    #: field -> boost at query time (words in every English field, identifiers in ``ident``)
    boosts: dict[str, float]
    #: dismax tie-breaker over the English fields per word; None: the sum (the backend's)
    tie: float | None = None
    #: look up in ``ident`` only the query's identifier-shaped tokens, not every word
    identifiers_only: bool = False
    #: the weight of a plain word's exact form in ``ident`` (identifier-shaped tokens keep
    #: the field's boost); None: every token at the field's boost
    plain_exact: float | None = None


def identifier_tokens(query: str) -> list[str]:
    """The query's tokens as the ``ident`` analyzer cuts them, kept where they are shaped
    like an identifier (``lexical``'s rule: a joiner, a CamelCase joint, letters with
    digits), judged on the text as typed (lowercasing hides ``etcdNoLeader``'s joints)."""
    return [m.group().lower() for m in re.finditer(IDENT_PATTERN, query) if lex.is_identifier(m.group())]


#: The name rule of (a), as the backend now applies it (full-text version 5).
title_is_name = lex.title_is_name
path_is_name = lex.path_is_name


def _named(heading: str) -> str:
    return with_identifier_words(heading) if lex.title_is_name(heading) else ""


def chunk_fields(title: str, section: str, text: str, uri: str) -> dict[str, str]:
    """Every field a variant may search: the layout of full-text version 4 (a field per
    part: title, section, body, path), the backend's own (version 5: ``content``, names in
    ``name_title`` / ``name_path``), and the BM25F experiments'."""
    fields = field_texts(title, section, text, uri)
    path = lex.path_text(uri) if uri else ""
    layout = {
        "title": with_identifier_words(title),
        "section": with_identifier_words(section),
        "body": with_identifier_words(text),
        "path": with_identifier_words(path),
        "ident": fields["ident"],
        "all": fields["content"],
        # (a): a name keeps a short field of its own beside the flat one; a sentence is in
        # the flat field only, so it gets no short field's length normalisation.
        "name_title": fields["title"],
        "name_path": fields["path"],
        # The section's own heading (the last of its path) where it is a name: a heading
        # labels its section as a title labels its page.
        "name_section": _named(section.split(SECTION_SEPARATOR)[-1].strip()),
    }
    for weight in BM25F_WEIGHTS:
        names = "\n".join([title, path] * weight)
        layout[f"bm25f{weight}"] = with_identifier_words(f"{names}\n{section}\n{text}")
    return layout


VARIANTS: dict[str, Variant] = {
    # The backend: (a) below, at the default boosts, a plain word's exact form at
    # ``PLAIN_EXACT_FORM``; ``v5`` the same with every exact form at 1 (before that rule).
    "current": Variant(
        {"all": 1.0, "name_title": 1.0, "name_path": 1.0, "ident": 1.0}, plain_exact=PLAIN_EXACT_FORM),
    "v5: plain words' exact form at 1": Variant(
        {"all": 1.0, "name_title": 1.0, "name_path": 1.0, "ident": 1.0}),
    "v4: a field per part": Variant({"title": 1.0, "section": 1.0, "body": 1.0, "path": 1.0, "ident": 1.0}),
    "flat": Variant({"all": 1.0, "ident": 1.0}),
    "flat, no ident": Variant({"all": 1.0}),
    "flat + title/path at 0.5": Variant({"all": 1.0, "title": 0.5, "path": 0.5, "ident": 1.0}),
    "current, ident for identifiers only": Variant(
        {"title": 1.0, "section": 1.0, "body": 1.0, "path": 1.0, "ident": 1.0}, identifiers_only=True),
    "current, no ident": Variant({"title": 1.0, "section": 1.0, "body": 1.0, "path": 1.0}),
    "flat, ident for identifiers only": Variant({"all": 1.0, "ident": 1.0}, identifiers_only=True),
    "flat + title/path at 0.5, ident for identifiers only": Variant(
        {"all": 1.0, "title": 0.5, "path": 0.5, "ident": 1.0}, identifiers_only=True),
    **{f"bm25f: title/path x{w}": Variant({f"bm25f{w}": 1.0, "ident": 1.0}) for w in BM25F_WEIGHTS},
    **{f"bm25f: title/path x{w}, ident for identifiers only": Variant(
        {f"bm25f{w}": 1.0, "ident": 1.0}, identifiers_only=True) for w in BM25F_WEIGHTS},
    "flat + path at 1": Variant({"all": 1.0, "path": 1.0, "ident": 1.0}),
    "flat + title/path at 1": Variant({"all": 1.0, "title": 1.0, "path": 1.0, "ident": 1.0}),
    "flat + title/path at 1, ident for identifiers only": Variant(
        {"all": 1.0, "title": 1.0, "path": 1.0, "ident": 1.0}, identifiers_only=True),
    "dismax:0.3, ident for identifiers only": Variant(
        {"title": 1.0, "section": 1.0, "body": 1.0, "path": 1.0, "ident": 1.0}, 0.3, identifiers_only=True),
    "dismax:0.3": Variant({"title": 1.0, "section": 1.0, "body": 1.0, "path": 1.0, "ident": 1.0}, 0.3),
    "dismax:0.6": Variant({"title": 1.0, "section": 1.0, "body": 1.0, "path": 1.0, "ident": 1.0}, 0.6),
    **{f"flat + named title/path at {w:g}{tail}": Variant(
        {"all": 1.0, "name_title": w, "name_path": w, "ident": 1.0}, identifiers_only=only)
       for w in (1.0, 0.5) for tail, only in (("", False), (", ident for identifiers only", True))},
    # A plain word's exact form as a tie-breaker among its stem's matches, an identifier
    # whole as evidence of its own (docs/quality.md, "A plain word's exact form").
    "current, plain words' exact form at 0.25": Variant(
        {"all": 1.0, "name_title": 1.0, "name_path": 1.0, "ident": 1.0}, plain_exact=0.25),
    "flat + named title/path/section at 1": Variant(
        {"all": 1.0, "name_title": 1.0, "name_path": 1.0, "name_section": 1.0, "ident": 1.0}),
    "flat + named title/path at 1, named section at 0.5": Variant(
        {"all": 1.0, "name_title": 1.0, "name_path": 1.0, "name_section": 0.5, "ident": 1.0}),
}


class VariantIndex:
    """Every chunk of the SQLite index in one tantivy index with every field a variant
    may search (``all`` beside the backend's own)."""

    def __init__(self, index: Path, directory: Path) -> None:
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("rowid", indexed=True, fast=True)
        for field in (*ENGLISH, "all", "name_title", "name_path", "name_section",
                      *(f"bm25f{w}" for w in BM25F_WEIGHTS)):
            builder.add_text_field(field, tokenizer_name=STEMMED, index_option="freq")
        builder.add_text_field("ident", tokenizer_name=IDENT, index_option="freq")
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema, str(directory))
        for name, analyzer in analyzers().items():
            self.index.register_tokenizer(name, analyzer)
        conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
        writer = self.index.writer(heap_size=64_000_000, num_threads=1)
        #: rowid -> the chunk's words as the verbatim rule reads them
        self.text: dict[int, str] = {}
        #: uri -> (title, path) of its first chunk, for the name/sentence counts
        self.names: dict[str, tuple[str, str]] = {}
        for rowid, title, section, text, uri in conn.execute(
            "SELECT id, title, section, text, uri FROM chunks ORDER BY id"
        ):
            self.text[rowid] = f"{title}\n{section}\n{text}"
            self.names.setdefault(uri, (title, lex.path_text(uri) if uri else ""))
            document = tantivy.Document()
            document.add_integer("rowid", rowid)
            for field, value in chunk_fields(title, section, text, uri).items():
                document.add_text(field, value)
            writer.add_document(document)
        writer.commit()
        writer.wait_merging_threads()
        conn.close()
        self.index.reload()

    def _term(self, field: str, token: str, boost: float) -> tantivy.Query:
        term = tantivy.Query.term_query(self.schema, field, token, index_option="position")
        return term if boost == 1.0 else tantivy.Query.boost_query(term, boost)

    def search(self, variant: Variant, query: str, limit: int) -> list[Hit]:
        words, identifiers = query_terms(query)
        if variant.identifiers_only:
            shaped = set(identifier_tokens(query))
            identifiers = [token for token in identifiers if token in shaped]
        english = [f for f in variant.boosts if f != "ident"]
        clauses: list[tantivy.Query] = []
        for token in words:
            per_field = [self._term(field, token, variant.boosts[field]) for field in english]
            if variant.tie is not None and len(per_field) > 1:
                clauses.append(tantivy.Query.disjunction_max_query(per_field, tie_breaker=variant.tie))
            else:
                clauses.extend(per_field)
        if "ident" in variant.boosts:
            boost = variant.boosts["ident"]
            plain = variant.plain_exact
            shares = ident_weights(query, identifiers) if plain is not None else {}
            for token in identifiers:
                whole = shares.get(token, 1.0) == 1.0
                clauses.append(self._term("ident", token, boost if whole or plain is None else boost * plain))
        if not clauses:
            return []
        scoring = tantivy.Query.boolean_query([(tantivy.Occur.Should, c) for c in clauses])
        searcher = self.index.searcher()
        hits = searcher.search(scoring, limit, count=False).hits
        rowids = searcher.fast_field_values("rowid", [address for _, address in hits])
        return [(int(r), float(s)) for (s, _), r in zip(hits, rowids, strict=True) if r is not None]


Lean = Callable[[EvalQuery], dict[str, float] | None]


def hybrid(
    channels: Channels, bm25: dict[str, list[Hit]], lean: Lean | None = None,
) -> Callable[[EvalQuery], list[int]]:
    def ranked(query: EvalQuery) -> list[int]:
        lists = {"bm25": bm25[query.qid][:EVAL_TOP_K], "vector": channels.vector[query.qid][:EVAL_TOP_K]}
        floors = {"bm25": 0.0} if len(lists["bm25"]) < EVAL_TOP_K else None
        weights = lean(query) if lean is not None else None
        return [rowid for rowid, _, _ in normalized_score_fusion(lists, floors=floors, weights=weights)]

    return ranked


#: (b) The copied-query rule as it landed: ``lore.fusion.word_runs`` (runs of
#: ``COPIED_RUN_WORDS`` = 8 words; a Go-template placeholder breaks a run). Why 8: copy
#: detection takes word n-grams of 5-10 as the unit no two independent writers share by
#: chance (Broder's shingles, plagiarism detectors' 8-grams); fixed before measuring.


def copied(variants: VariantIndex, bm25: dict[str, list[Hit]]) -> Callable[[EvalQuery], bool]:
    def rule(query: EvalQuery) -> bool:
        hits = bm25[query.qid]
        return bool(hits) and not word_runs(query.text).isdisjoint(word_runs(variants.text[hits[0][0]]))

    return rule


def name_counts(variants: VariantIndex) -> str:
    """Per source (the uri's first segment): documents whose title, and whose path, the
    rule takes for a name."""
    counts: dict[str, list[int]] = {}
    for uri, (title, path) in variants.names.items():
        source = uri.partition("://")[2].split("/")[0] if "://" in uri else ""
        source = source if source.isalpha() or "-" in source else uri.partition("://")[0]
        row = counts.setdefault(source, [0, 0, 0])
        row[0] += 1
        row[1] += title_is_name(title)
        row[2] += path_is_name(path)
    return "\n".join(f"{source}: {n} documents, title a name {t}, path a name {p}"
                     for source, (n, t, p) in sorted(counts.items()))


def main() -> None:
    parser = query_parser(__doc__)
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--verbatim", action="store_true",
                        help="(b): also fuse with a lexical lean on copied queries only")
    args = parser.parse_args()
    queries = parsed_queries(parser, args)
    print(f"{len(queries)} queries, index {args.index}")
    channels = Channels(args.index, queries, EVAL_TOP_K)
    rows = [("backend bm25", channels.score(single(channels.bm25(EVEN)))),
            ("vector", channels.score(single(channels.vector)))]
    with tempfile.TemporaryDirectory(prefix="lore-lexical-") as scratch:
        variants = VariantIndex(args.index, Path(scratch))
        print(name_counts(variants))
        for name in args.variant or VARIANTS:
            variant = VARIANTS[name]
            bm25 = {q.qid: variants.search(variant, q.text, EVAL_TOP_K) for q in queries}
            rows.append((f"bm25 {name}", channels.score(single(bm25))))
            rows.append((f"hybrid {name}", channels.score(hybrid(channels, bm25))))
            if args.verbatim:
                fires = copied(variants, bm25)
                fired = sum(fires(q) for q in queries)
                print(f"{name}: verbatim rule fires on {fired} of {len(queries)} queries")
                for label, lean in (("bm25 only", {"bm25": 1.0, "vector": 0.0}),
                                    ("bm25 x2", {"bm25": 2.0, "vector": 1.0})):
                    rule = (lambda q, w=lean, f=fires: w if f(q) else None)  # noqa: E731
                    rows.append((f"hybrid {name}, copied -> {label} ({fired} fired)",
                                 channels.score(hybrid(channels, bm25, rule))))
    table("BM25 fields and query analysis (alone, and fused by min-max with vectors)", rows)


if __name__ == "__main__":
    main()
