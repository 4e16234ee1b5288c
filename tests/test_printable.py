"""kimitui.core.printable: outside text made printable, and the words built on it (describe, procdisplay,
the report's cells)."""

from __future__ import annotations

import unicodedata

import pytest

from kimitui.core.describe import describe, preview_text
from kimitui.core.events import LogLine, ProcRef, StepPreview
from kimitui.core.printable import printable, printable_lines
from kimitui.core.procdisplay import command_gist, unit_label
from kimitui.report.format import document, table

ESCAPED = ("Cc", "Cf", "Cs", "Zl", "Zp")


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b]0;pwned\x07\x1b[31mred", "\\x1b]0;pwned\\x07\\x1b[31mred"),  # OSC title, BEL, SGR colour
    ("a\rb\bc\x7fd\x00e", "a\\x0db\\x08c\\x7fd\\x00e"),  # CR, backspace, DEL, NUL
    ("\x85\x9b31m", "\\x85\\x9b31m"),  # C1: NEL, CSI
    ("file\u202etxt.exe", "file\\u202etxt.exe"),  # right-to-left override
    ("\u2066a\u2067b\u2068c\u2069", "\\u2066a\\u2067b\\u2068c\\u2069"),  # bidi isolates
    ("zero\u200bwidth\u200d\ufeff", "zero\\u200bwidth\\u200d\\ufeff"),  # zero-width space, joiner, BOM
    ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),  # line and paragraph separators
    ("bad\udc80byte", "bad\\udc80byte"),  # a lone surrogate (an undecodable byte)
    ("tag\U000e0041", "tag\\U000e0041"),  # a tag character, beyond the BMP
    ("one\ntwo\tthree", "one\\x0atwo\\x09three"),  # a one-line field: newline and tab too
])
def test_control_and_format_characters_are_escaped_visibly(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert printable(shown) == shown  # escaping twice changes nothing


@pytest.mark.parametrize("text", ["vllm.service", "python3 -m vllm --port 8000", "NVIDIA H200", "",
                                  "Grüße 東京 — ok", "emoji 🚀", "nbsp\u00a0here", "[bold red]x[/]", "C:\\path"])
def test_printable_text_is_unchanged(text: str) -> None:
    assert printable(text) == text
    assert printable_lines(text) == text


def test_a_document_keeps_its_lines_and_tabs_and_escapes_the_rest() -> None:
    assert printable_lines("a\n\tb\x1b[2J\r\n") == "a\n\tb\\x1b[2J\\x0d\n"


def test_no_code_point_that_should_be_escaped_survives() -> None:
    for code in range(0x110000):
        ch = chr(code)
        if unicodedata.category(ch) in ESCAPED:
            assert printable(ch).isascii() and printable(ch).isprintable(), hex(code)


def test_the_words_of_an_event_and_a_process_are_printable() -> None:
    cmdline = "/usr/bin/\x1b]0;x\x07evil\u202e --flag \x1b[31m"
    assert command_gist(cmdline) == "\\x1b]0;x\\x07evil\\u202e --flag \\x1b[31m"
    assert unit_label("vllm\x1b[2J.service") == "vllm\\x1b[2J.service"
    assert unit_label("docker:\x1b[2J5d6c468c1f") == "docker:\\x1b[2J5d6c"  # the id cut to 8, then escaped
    line = describe(LogLine(0.0, "error", "agent\x1b", "HTTP 500: \x1b]0;t\x07\nnext"))
    assert line == "HTTP 500: \\x1b]0;t\\x07\\x0anext"
    ref = ProcRef(pid=7, start_time=1, user="u\x1b", gpus=[0], mem_mib=1.0, unit="u\u202e", cmdline=cmdline,
                  reason="why\x07")
    text = preview_text(StepPreview(0.0, step="process", action="SIGKILL \x1b[5m", targets=[ref]))
    assert not [c for c in text if c != "\n" and unicodedata.category(c) in ESCAPED], text
    assert "SIGKILL \\x1b[5m" in text and "u\\x1b" in text and "why\\x07" in text


def test_markdown_cells_and_lines_stay_whole() -> None:
    rows = table(["a", "b"], [["x | y\nz", "\x1b[31m"]])
    assert rows[-1] == "| x \\| y\\x0az | \\x1b[31m |"
    assert document(["# head", "note: \x1b]0;t\x07", "bad \udc80"]) == "# head\nnote: \\x1b]0;t\\x07\nbad \\udc80"
