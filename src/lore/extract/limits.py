"""Bounds on what one file may cost, checked before the expensive work starts.

A DOCX is a zip: its central directory declares every member's compressed and
uncompressed size, so a zip bomb is refused from the directory alone, before one byte is
inflated. The declared sizes are binding: CPython's ``zipfile`` never returns more than a
member's declared ``file_size`` (it truncates, then fails the CRC check), so a directory
that lies about a size cannot make a reader inflate more than the directory admits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lore.errors import ExtractionError

if TYPE_CHECKING:
    import zipfile


@dataclass(frozen=True)
class Limits:
    #: The file itself; sources pass their own ``max_file_bytes``.
    max_bytes: int = 20_000_000
    #: A DOCX's members, all together, once inflated.
    max_uncompressed_bytes: int = 100_000_000
    max_members: int = 2_000
    #: Inflated / compressed over the whole archive. Real DOCX files sit around 3-10
    #: (XML compresses well); a bomb is in the hundreds or thousands.
    max_ratio: float = 100.0
    #: Pages of one PDF: a 10,000-page file is a dump, not a runbook.
    max_pages: int = 5_000
    #: Characters of extracted Markdown.
    max_chars: int = 20_000_000


DEFAULT_LIMITS = Limits()


def check_size(data: bytes, limit: int) -> None:
    if len(data) > limit:
        raise ExtractionError(f"file is {len(data):,} bytes, over the limit ({limit:,})")


def open_zip(data: bytes, limits: Limits, kind: str) -> zipfile.ZipFile:
    """The archive, once its directory shows it is within ``limits``."""
    import io
    import zipfile  # here: the filesystem source imports this package for every command

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ExtractionError(f"broken {kind}: not a readable zip archive ({err})") from err
    members = archive.infolist()
    if len(members) > limits.max_members:
        raise ExtractionError(f"{kind} has too many parts ({len(members):,} > {limits.max_members:,})")
    inflated = sum(member.file_size for member in members)
    if inflated > limits.max_uncompressed_bytes:
        raise ExtractionError(
            f"{kind} too large when uncompressed ({inflated:,} > {limits.max_uncompressed_bytes:,} bytes)"
        )
    packed = sum(member.compress_size for member in members)
    if inflated > limits.max_ratio * max(packed, 1) and inflated > 1_000_000:
        raise ExtractionError(
            f"{kind} compression ratio {inflated / max(packed, 1):,.0f}:1 is over "
            f"{limits.max_ratio:,.0f}:1 (a zip bomb?)"
        )
    return archive


def check_chars(markdown: str, limits: Limits) -> str:
    if len(markdown) > limits.max_chars:
        too_long = f"{len(markdown):,} > {limits.max_chars:,} characters"
        raise ExtractionError(f"extracted text too long ({too_long})")
    return markdown
