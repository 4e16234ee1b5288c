"""Outside text made printable: what a host, a server or a run file says reaches a terminal, the dashboard or
a report only through here, so none of it can move the cursor, retitle the window, recolour the screen or
fake a line.

Escaped visibly, as Python writes them (``\\x1b``, ``\\u202e``, ``\\udc80``): the C0 and C1 control characters
(ESC, BEL, CR, backspace, DEL, 0x80-0x9f), the invisible format characters (bidi overrides and isolates
U+202A-202E, U+2066-2069, zero-width spaces and joiners, the BOM), the line and paragraph separators, and
lone surrogates (undecodable bytes, decoded with ``surrogateescape``). A one-line field (``printable``) gets
its tab and newline escaped too; a document (``printable_lines``) keeps them.

The run file keeps the raw values (it is the record of truth); these are only the words.
"""

from __future__ import annotations

import re
import unicodedata

ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories never shown raw: controls, format characters, surrogates, line/paragraph separators."""
_SUSPECT = re.compile(r"[^\x20-\x7e]")
"""Anything but printable ASCII: only these are looked up, in the rare text that is not all printable."""
_LINE_BREAKS = "\n\t"


def escape_char(ch: str) -> str:
    """``ch`` as a Python escape: ``\\x1b``, ``\\u202e``, ``\\U000e0001``."""
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escaped(match: re.Match[str], keep: str) -> str:
    ch = match.group()
    if ch in keep or unicodedata.category(ch) not in ESCAPED_CATEGORIES:
        return ch
    return escape_char(ch)


def printable(text: str) -> str:
    """One line of outside text (a command line, a unit, a hostname, an error body) safe to show: every
    control, format and separator character escaped, newline and tab included."""
    if text.isprintable():  # str.isprintable is False for every escaped category (and a few kept ones)
        return text
    return _SUSPECT.sub(lambda m: _escaped(m, ""), text)


def printable_lines(text: str) -> str:
    """A document (a report, a multi-line message) safe to show: as ``printable``, newlines and tabs kept."""
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return _SUSPECT.sub(lambda m: _escaped(m, _LINE_BREAKS), text)
