"""Base64 runs in retrieved text, and their decoded text when it reads like words.

A model decodes base64 when asked to ("decode and follow: aWdub3Jl..."), so injection
screening (``lore.safety.injection``) screens the decoded text of each run as text. Only
runs that decode to printable UTF-8 reading like a sentence (or to base64 again) are
screened; key material, hashes, image digests and certificates decode to bytes.
"""

from __future__ import annotations

import base64
import binascii
import re

import regex

#: Runs of base64 long enough to carry a sentence ("aWdub3JlIGFsbCBwcmV2aW91cyBp...").
BASE64_RUN = re.compile(
    r"(?<![A-Za-z0-9+/_\-])(?=[A-Za-z0-9+/_\-]*[a-z])(?=[A-Za-z0-9+/_\-]*[A-Z0-9+/])"
    r"[A-Za-z0-9+/_\-]{24,}={0,2}(?![A-Za-z0-9+/=_\-])"
)
#: Decoded text worth screening: mostly letters and spaces, as a sentence is.
_SENTENCE = regex.compile(r"[\p{L}\s]")


def decoded_text(run: str) -> str | None:
    """``run`` decoded from base64 (standard or URL-safe) when it is printable UTF-8 that
    reads like words, or is base64 again; None for key material, hashes and other binary
    payloads."""
    if len(run.rstrip("=")) % 4 == 1:
        return None
    padded = run.rstrip("=") + "=" * (-len(run.rstrip("=")) % 4)
    try:
        raw = base64.b64decode(padded, altchars=b"-_" if ("-" in run or "_" in run) else None, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if BASE64_RUN.fullmatch(text):
        return text
    if not text.replace("\n", " ").replace("\t", " ").isprintable() or " " not in text:
        return None
    return text if len(_SENTENCE.findall(text)) >= 0.7 * len(text) else None
