"""Documents into chunks sized for the embedder, cut where the document's own structure
allows: between sections, then paragraphs, then sentences, then lines, then words.

    body ─► blocks (text_blocks: headings, paragraphs, lists, code, tables, data keys)
         ─► units  (a block, or its pieces when the block alone exceeds the budget)
         ─► chunks (consecutive units of one section, packed up to the budget, each chunk
                    starting with a little overlap from the one before)

Every chunk is a verbatim slice of the body, so nothing is lost or rewritten, and a
code block or table is only ever cut when it alone is larger than the budget.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from frontmatter.default_handlers import BaseHandler, YAMLHandler

from lore import text_blocks
from lore.errors import ConfigError
from lore.extract import MARKDOWN_MEDIA_TYPES
from lore.models import SECTION_SEPARATOR, Chunk, Document, make_chunk_id, sha256_hex
from lore.protocols import Embedder, TokenCounting
from lore.text_blocks import HEADING, SPLITTERS, Block

TokenCounter = Callable[[str], int]

#: Room kept free in the embedder's window for the contextual header that
#: ``lore.models.embedding_text`` puts before each chunk (title › section) and for the
#: model's own special tokens. A longer header shrinks that section's budget instead.
HEADER_ROOM_TOKENS = 32
#: The model's own tokens around every input ([CLS] and [SEP] for BERT-style models).
SPECIAL_TOKENS = 2
#: Bump when a change to the splitting rules changes chunks: the next sync re-chunks
#: every document (re-embedding only texts that changed), as for a change of settings.
CHUNKING_VERSION = 2
#: The default budget never grows past this even for long-window embedders: long chunks
#: blur retrieval and passages are cut at ``safety.max_passage_chars`` anyway.
DEFAULT_MAX_TOKENS = 256
MIN_MAX_TOKENS = 16

# -- token counting ------------------------------------------------------------------

# WordPiece splits anything outside its vocabulary into pieces of 2-4 letters
# (``kube-apiserver`` is 6 tokens, ``NodeRAIDDiskFailure`` 7), long numbers into pairs
# and every non-Latin letter into its own token. Counting pieces the same way keeps the
# estimate at or above the real count for technical text: on the ../shared runbooks it
# is within 0.87x of all-MiniLM-L6-v2's tokenizer on 99.9% of chunk-sized windows and
# 1.2x on the median, at roughly 10 MB/s.
_WORD_PIECE = re.compile(r"[A-Z]?[a-z]{1,4}|[A-Z]{1,2}|\d{1,2}|[^\W\d_A-Za-z]|[^\w\s]|_")


def estimate_tokens(text: str) -> int:
    """A fast, slightly pessimistic WordPiece token count (no tokenizer needed)."""
    return len(_WORD_PIECE.findall(text))


# -- front matter --------------------------------------------------------------------

_YAML_FRONT_MATTER = YAMLHandler()
# python-frontmatter's own TOML handler needs the third-party ``toml`` package; its
# boundary logic with the standard library's tomllib does the same job.
_TOML_FRONT_MATTER = BaseHandler(fm_boundary=re.compile(r"^\+{3,}\s*$", re.MULTILINE))
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")

#: Media types whose files may open with front matter. YAML files are excluded on
#: purpose: their ``---`` is a document marker, not front matter.
FRONT_MATTER_MEDIA_TYPES = frozenset({"text/markdown", "text/plain", "text/x-rst"})

#: PyYAML's libyaml-backed safe loader when built with it (it parses the same YAML with
#: the same constructors, several times faster); its pure-Python one otherwise.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_YAML_LOADER)


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """``(metadata, body)`` for YAML (``---``) or TOML (``+++``) front matter.

    Front matter that does not parse into a mapping is not front matter: the text comes
    back unchanged with empty metadata, never an exception.
    """
    candidate = text.lstrip("\ufeff \t\r\n")
    loaders: tuple[tuple[Any, Callable[[str], Any]], ...] = (
        (_YAML_FRONT_MATTER, _yaml_load),
        (_TOML_FRONT_MATTER, tomllib.loads),
    )
    for handler, load in loaders:
        if not handler.detect(candidate):
            continue
        try:
            raw, body = handler.split(candidate)
            metadata = load(raw)
        except (ValueError, yaml.YAMLError):  # tomllib.TOMLDecodeError is a ValueError
            return {}, text
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            return {}, text
        return {str(key): value for key, value in metadata.items()}, _LEADING_BLANK_LINES.sub("", body)
    return {}, text


# -- chunking ------------------------------------------------------------------------

_PARSERS: dict[str, Callable[[str, str], list[Block]]] = {
    "text/markdown": text_blocks.markdown_blocks,
    "text/x-markdown": text_blocks.markdown_blocks,
    "text/plain": text_blocks.plain_blocks,
    "text/x-rst": text_blocks.rst_blocks,
    "application/yaml": text_blocks.yaml_blocks,
    "application/x-yaml": text_blocks.yaml_blocks,
    "text/yaml": text_blocks.yaml_blocks,
    "application/toml": text_blocks.toml_blocks,
    "application/json": text_blocks.json_blocks,
    # PDF, DOCX and HTML documents carry their original media type and lore.extract's Markdown.
    **dict.fromkeys(MARKDOWN_MEDIA_TYPES, text_blocks.markdown_blocks),
}


def base_media_type(media_type: str) -> str:
    """``text/markdown; charset=utf-8`` -> ``text/markdown``."""
    return media_type.split(";", 1)[0].strip().lower()


@dataclass(frozen=True, slots=True)
class _Unit:
    """A span that is packed whole: a block, or one piece of a block too large alone."""

    start: int
    end: int
    tokens: int
    kind: str


@dataclass(slots=True)
class _Group:
    """Consecutive units under one heading path; a chunk never spans two groups."""

    section: str
    units: list[_Unit]
    budget: int


class Chunker:
    """Splits documents into chunks of at most ``max_tokens`` (by ``count_tokens``),
    each starting with up to ``overlap_tokens`` of the previous chunk's tail when both
    sit in the same section.

    Given the embedder's ``window``, a section whose contextual header (title › section)
    is long gets a smaller budget, so header and chunk together still fit the window."""

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        overlap_tokens: int = 32,
        count_tokens: TokenCounter | None = None,
        *,
        window: int | None = None,
        counter_id: str = "estimate",
    ) -> None:
        if max_tokens < 1:
            raise ConfigError(f"chunk size must be at least 1 token, got {max_tokens}")
        if not 0 <= overlap_tokens < max_tokens:
            raise ConfigError(
                f"chunk overlap must be at least 0 and below the chunk size ({max_tokens} tokens), "
                f"got {overlap_tokens}"
            )
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.count_tokens: TokenCounter = count_tokens or estimate_tokens
        self.window = window
        self._counter_id = counter_id if count_tokens is not None else "estimate"

    @property
    def signature(self) -> str:
        """Everything that decides where chunks are cut; sync re-chunks when it changes."""
        return (
            f"v{CHUNKING_VERSION} max={self.max_tokens} overlap={self.overlap_tokens} "
            f"window={self.window} tokens={self._counter_id}"
        )

    @classmethod
    def for_embedder(
        cls, embedder: Embedder, *, max_tokens: int | None = None, overlap_tokens: int = 32
    ) -> Chunker:
        """A chunker whose chunks, with their contextual header, fit the embedder's input
        window, so no chunk is silently truncated when it is embedded. Tokens are counted
        with the embedder's own tokenizer when it declares one (``TokenCounting``)."""
        window = embedder.max_input_tokens
        if max_tokens is None:
            max_tokens = min(DEFAULT_MAX_TOKENS, window - HEADER_ROOM_TOKENS)
            if max_tokens < MIN_MAX_TOKENS:
                raise ConfigError(
                    f"embedder {embedder.model_id!r} takes only {window} input tokens, too few to "
                    f"hold a chunk and its {HEADER_ROOM_TOKENS}-token header"
                )
        elif max_tokens > window:
            raise ConfigError(
                f"chunk size {max_tokens} exceeds the input window of embedder "
                f"{embedder.model_id!r} ({window} tokens); lower chunk_tokens"
            )
        if isinstance(embedder, TokenCounting):
            return cls(
                max_tokens, overlap_tokens, embedder.count_tokens, window=window, counter_id=embedder.model_id
            )
        return cls(max_tokens, overlap_tokens, window=window)

    def chunk(self, document: Document) -> list[Chunk]:
        media_type = base_media_type(document.media_type)
        body = document.text.replace("\r\n", "\n").replace("\r", "\n")
        if media_type in FRONT_MATTER_MEDIA_TYPES:
            body = split_front_matter(body)[1]
        if not body.strip():
            return []
        parse = _PARSERS.get(media_type, text_blocks.plain_blocks)
        budgets: dict[str, int] = {}

        def budget(section: str) -> int:
            if section not in budgets:
                budgets[section] = self._budget(document.title, section)
            return budgets[section]

        pieces = [
            (start, end, group.section)
            for group in self._groups(body, parse(body, document.title), budget)
            for start, end in self._pack(body, group.units, group.budget)
        ]
        return [
            self._make_chunk(document, ordinal, body[start:end], section)
            for ordinal, (start, end, section) in enumerate(pieces)
        ]

    def _budget(self, title: str, section: str) -> int:
        """Tokens a chunk of this section may hold so that, under its header, it still
        fits the window; never below a quarter of the window (a pathological header is
        truncated by the model rather than shredding its section into slivers)."""
        if self.window is None:
            return self.max_tokens
        header = SECTION_SEPARATOR.join(part for part in (title, section) if part)
        room = self.window - SPECIAL_TOKENS - (self.count_tokens(header) if header else 0)
        return min(self.max_tokens, max(room, self.window // 4, MIN_MAX_TOKENS))

    # -- blocks to groups of units -----------------------------------------------------

    def _groups(self, body: str, blocks: list[Block], budget: Callable[[str], int]) -> list[_Group]:
        groups: list[_Group] = []
        for block in blocks:
            tokens = self.count_tokens(body[block.start : block.end])
            limit = budget(block.section)
            oversized = tokens > limit
            section = block.key if oversized and block.key else block.section
            if section != block.section:
                limit = budget(section)
            units = (
                self._split(body, block.start, block.end, block.kind, 0, limit)
                if oversized
                else [_Unit(block.start, block.end, tokens, block.kind)]
            )
            starts_group = block.kind == HEADING or (oversized and bool(block.key))
            if starts_group or not groups or groups[-1].section != section:
                groups.append(_Group(section, units, limit))
            else:
                groups[-1].units.extend(units)
        return _carry_bare_headings(groups)

    def _split(self, body: str, start: int, end: int, kind: str, level: int, limit: int) -> list[_Unit]:
        """Pieces of an over-budget span, each within budget unless it is one word."""
        splitters = SPLITTERS[kind]
        for depth in range(level, len(splitters)):
            spans = splitters[depth](body, start, end)
            if len(spans) > 1:
                break
        else:
            return [_Unit(start, end, self.count_tokens(body[start:end]), kind)]
        units: list[_Unit] = []
        for piece_start, piece_end in spans:
            tokens = self.count_tokens(body[piece_start:piece_end])
            if tokens <= limit:
                units.append(_Unit(piece_start, piece_end, tokens, kind))
            else:
                units.extend(self._split(body, piece_start, piece_end, kind, depth, limit))
        return units

    # -- packing -------------------------------------------------------------------------

    def _pack(self, body: str, units: list[_Unit], limit: int) -> list[tuple[int, int]]:
        """Greedy: fill each chunk with whole units; the next chunk opens with overlap."""
        chunks: list[tuple[int, int]] = []
        current: list[_Unit] = []
        used = 0
        opening: int | None = None
        for unit in units:
            if current and used + unit.tokens > limit:
                chunks.append((opening if opening is not None else current[0].start, current[-1].end))
                opening, used = self._overlap(body, current, limit - unit.tokens)
                current = []
            current.append(unit)
            used += unit.tokens
        if current:
            chunks.append((opening if opening is not None else current[0].start, current[-1].end))
        return chunks

    def _overlap(self, body: str, previous: list[_Unit], room: int) -> tuple[int | None, int]:
        """The earliest sentence or line start in ``previous`` whose tail still fits both
        the overlap allowance and ``room``; never the whole of ``previous``."""
        allowance = min(self.overlap_tokens, room)
        end = previous[-1].end
        best: tuple[int | None, int] = (None, 0)
        if allowance <= 0:
            return best
        for unit in reversed(previous):
            if unit.kind == HEADING:
                break
            inner = text_blocks.overlap_cuts(body, unit.start, unit.end, unit.kind)
            candidates = [*reversed(inner), unit.start] if unit is not previous[0] else list(reversed(inner))
            for position in candidates:
                tokens = self.count_tokens(body[position:end])
                if tokens > allowance:
                    return best
                best = (position, tokens)
        return best

    def _make_chunk(self, document: Document, ordinal: int, text: str, section: str) -> Chunk:
        return Chunk(
            id=make_chunk_id(document.uri, ordinal, text),
            uri=document.uri,
            ordinal=ordinal,
            text=text,
            section=section,
            content_hash=sha256_hex(text),
            title=document.title,
            revision=document.revision,
            updated_at=document.updated_at,
            labels=dict(document.labels),
        )


def _carry_bare_headings(groups: list[_Group]) -> list[_Group]:
    """A heading with nothing under it before the next heading (``## Diagnosis`` then
    ``### Check the logs``) joins the next group rather than becoming a chunk alone."""
    merged: list[_Group] = []
    pending: _Group | None = None
    for group in groups:
        if all(unit.kind == HEADING for unit in group.units):
            pending = _Group(group.section, [*(pending.units if pending else []), *group.units], group.budget)
            continue
        if pending is not None:
            group = _Group(group.section, [*pending.units, *group.units], group.budget)
            pending = None
        merged.append(group)
    if pending is not None:
        merged.append(pending)
    return merged
