"""Names that are not text: a file name with bytes that are not UTF-8 (old NFS shares,
tarballs made under another locale). Python hands such a name over with each bad byte as
a lone surrogate (``surrogateescape``), which no UTF-8 encoder accepts: stored, printed or
recorded in a run's history, it failed the whole sync. Such a document fails alone, with
a reason, under a uri that keeps its bytes reversibly: each undecodable byte, and every
``%`` so that the escape is unambiguous, percent-encoded (``bad%FFname.md``;
``urllib.parse.unquote_to_bytes`` gives back the original bytes).
"""

from __future__ import annotations

_LOW, _HIGH = 0xDC80, 0xDCFF  # surrogateescape's range: byte b is chr(0xDC00 + b)


def escape_name(name: str) -> str:
    """``name`` with every undecodable byte and every ``%`` percent-encoded, so the
    result is valid UTF-8 and ``unquote_to_bytes`` reverses it to the original bytes."""
    out = []
    for char in name:
        code = ord(char)
        if char == "%":
            out.append("%25")
        elif _LOW <= code <= _HIGH:
            out.append(f"%{code - 0xDC00:02X}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")))
        else:
            out.append(char)
    return "".join(out)


def not_text_reason(name: str) -> str | None:
    """Why a document under ``name`` cannot be indexed, or None when its name is text."""
    for char in name:
        code = ord(char)
        if _LOW <= code <= _HIGH:
            return f"file name is not valid UTF-8 (byte 0x{code - 0xDC00:02x}); rename the file to index it"
        if 0xD800 <= code <= 0xDFFF:
            return f"name holds a lone surrogate (U+{code:04X}), which is not text; rename it to index it"
    return None
