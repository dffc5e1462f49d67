"""File names that are not UTF-8, shown losslessly in UTF-8 and mapped back to their bytes.

A POSIX file name is bytes; the wire is UTF-8 (JSON). A name is *shown* (in Glob and
Grep output, in result details, to the model) like this:

- valid UTF-8 with no backslash: as it is (nearly every name);
- anything else: its UTF-8 text with every byte that is not part of valid UTF-8 written
  ``\\xHH`` (two lowercase hex digits) and every backslash written ``\\x5c``.

So ``caf\\xe9.txt`` (Latin-1 ``é``) is shown ``caf\\xe9.txt``, and a valid name that
holds a backslash, ``a\\b``, is shown ``a\\x5cb``. Showing is injective, and a shown
name passed back to Read, Edit, Write, Grep or Glob (``to_bytes``) names the same bytes.
A path the host never showed is taken literally unless it is exactly such an escaped form
(``to_bytes`` of a string whose unescaped bytes are valid UTF-8, or that is not the
canonical escape of its bytes, is its plain UTF-8).

Python's own spelling of such a name (``os.fsdecode``: surrogate escapes) is what the
host hands to ``os`` calls; it never reaches the wire (it cannot be encoded as UTF-8).
"""

from __future__ import annotations

import os
import re

_ESCAPE = re.compile(r"\\x([0-9a-f]{2})")


def _valid_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def show(raw: bytes) -> str:
    """The shown (UTF-8, lossless) form of a name or path given as bytes."""
    if b"\\" not in raw and _valid_utf8(raw):
        return raw.decode("utf-8")
    out: list[str] = []
    for ch in raw.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\x5c")
        else:
            out.append(ch)
    return "".join(out)


def show_os(name: str) -> str:
    """The shown form of a name in Python's ``os`` spelling (surrogate escapes)."""
    return show(os.fsencode(name))


def to_bytes(shown: str) -> bytes:
    """The bytes a shown (or plain) path names; ``UnicodeEncodeError`` for a string that
    holds a lone surrogate (never one the host showed)."""
    if "\\x" in shown:
        raw = _ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16))
                          if int(m.group(1), 16) >= 0x80 else m.group(0), shown)
        # Each escape of a byte below 0x80 is the byte itself (a backslash: 0x5c).
        raw_bytes = re.sub(rb"\\x([0-7][0-9a-f])", lambda m: bytes([int(m.group(1), 16)]),
                           raw.encode("utf-8", "surrogateescape"))
        if not _valid_utf8(raw_bytes) or b"\\" in raw_bytes:
            if show(raw_bytes) == shown:
                return raw_bytes
    return shown.encode("utf-8", "surrogateescape")


def to_os(shown: str) -> str:
    """A shown path in Python's ``os`` spelling, for ``os`` calls."""
    return os.fsdecode(to_bytes(shown))
