"""Untrusted text is inert: property-based (hypothesis) checks of marinctl.text.

Hostile strings are built from the tests' own pieces: CSI, OSC (incl. OSC 8 links and
OSC 52 clipboard writes), DCS/APC/PM/SOS, 8-bit C1 forms, C0 controls, bidi
overrides/isolates, lone surrogates and Rich/Textual markup, mixed into arbitrary text.
"""

from __future__ import annotations

import unicodedata

from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.text import Text

from marinctl.text import BIDI, inert, markup_safe

ESC = "\x1b"
HOSTILE = [
    ESC + "[31m", ESC + "[2J", ESC + "[H", ESC + "[1;1H", ESC + "[?1049h", ESC + "[38;2;1;2;3m",
    ESC + "]0;pwned" + "\x07", ESC + "]2;title" + ESC + "\\",
    ESC + "]8;;https://evil.example/" + ESC + "\\click" + ESC + "]8;;" + ESC + "\\",
    ESC + "]52;c;ZWNobyBwd25lZA==" + "\x07", ESC + "]52;c;ZWNobw==",  # unterminated OSC 52
    ESC + "P1$r0m" + ESC + "\\", ESC + "_apc" + ESC + "\\", ESC + "^pm" + ESC + "\\", ESC + "Xsos" + ESC + "\\",
    ESC + "c", ESC + "7", ESC + "(0", ESC,
    "\x9b31m", "\x9d0;title\x9c", "\x9d8;;http://x\x07", "\x90dcs\x9c", "\x85", "\x8d",
    "\x00", "\x07", "\x08", "\r", "\x0b", "\x0c", "\x7f", "\x1f",
    "\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c", "\u202a",
    "\ud800", "\udfff", "\u2028", "\u2029",
    "[bold red]", "[/]", "[link=https://evil.example]x[/link]", "[@click=app.quit]", "\\[b]", "\\", "\\\\[i]",
    "[", "]", ":smile:", "$var", "[on red]", "[#ff0000]",
]
hostile_piece = st.sampled_from(HOSTILE)
plain_piece = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
hostile_text = st.lists(st.one_of(hostile_piece, plain_piece), max_size=12).map("".join)


def _forbidden(ch: str) -> bool:
    o = ord(ch)
    return (o < 0x20 and ch not in "\t\n") or 0x7F <= o <= 0x9F or ch in BIDI or 0xD800 <= o <= 0xDFFF


@settings(max_examples=400, deadline=None)
@given(hostile_text)
def test_inert_leaves_no_escape_control_or_bidi_characters(s):
    out = inert(s)
    assert not any(_forbidden(c) for c in out), repr(out)
    assert "\x1b" not in out
    out.encode("utf-8")  # printable: never raises on a UTF-8 terminal
    one = inert(s, single_line=True)
    assert not any(_forbidden(c) or c in "\t\n" for c in one)
    assert inert(out) == out  # idempotent


@settings(max_examples=300, deadline=None)
@given(plain_piece, hostile_piece, plain_piece)
def test_terminated_sequences_drop_only_themselves(a, h, b):
    a, b = inert(a), inert(b)
    if h.startswith(ESC + "]52;c;ZWNobw==") or h == ESC or (h.startswith("\x9d") and not h.endswith(("\x07", "\x9c"))):
        return  # unterminated strings swallow the rest by design
    out = inert(a + h + b)
    assert out.startswith(a) and out.endswith(b)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), max_size=40))
def test_ordinary_text_is_untouched(s):
    assert inert(s) == s


@settings(max_examples=400, deadline=None)
@given(hostile_text)
def test_rich_renders_markup_safe_text_literally(s):
    expected = inert(s)
    if not expected.endswith("\\"):  # a trailing backslash is doubled for concatenation, as rich.markup.escape does
        assert Text.from_markup(markup_safe(s), emoji=False).plain == expected
    # Inside real markup (the way widgets use it), with no style leaking from the text.
    wrapped = Text.from_markup("[bold]" + markup_safe(s) + "[/bold]", emoji=False)
    assert wrapped.plain == expected
    assert all(span.style == "bold" for span in wrapped.spans)


@settings(max_examples=300, deadline=None)
@given(hostile_text)
def test_textual_renders_markup_safe_text_literally(s):
    from textual.content import Content

    assert Content.from_markup(markup_safe(s, dialect="textual")).plain == inert(s)


@settings(max_examples=200, deadline=None)
@given(hostile_text)
def test_rich_console_output_has_no_injected_sequences(s):
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, force_terminal=False, color_system=None, emoji=False, width=200).print(markup_safe(s))
    out = buf.getvalue()
    assert "\x1b" not in out
    assert not any(_forbidden(c) for c in out)


def test_known_attacks_are_removed_exactly():
    osc8 = f"{ESC}]8;;https://evil.example/{ESC}\\click me{ESC}]8;;{ESC}\\"
    assert inert(f"loss {osc8} spike") == "loss click me spike"
    assert inert(f"a{ESC}]52;c;ZWNobw==\x07b") == "ab"
    assert inert(f"x{ESC}]52;c;ZWNobw==") == "x"
    assert inert("safe\u202eexe.txt") == "safeexe.txt"
    assert inert(f"{ESC}[2J{ESC}[Hhello") == "hello"
    assert inert("a\r\nb\u2028c") == "a\nb\nc"
    assert inert("bad\ud800surrogate") == "bad\ufffdsurrogate"
    assert markup_safe("[bold]x[/bold] [1] a\\b") == "\\[bold]x\\[/bold] \\[1] a\\b"
    assert Text.from_markup(markup_safe("[bold]x[/bold] [1] \\[ a\\b"), emoji=False).plain == "[bold]x[/bold] [1] \\[ a\\b"
    assert Text.from_markup("[i]" + markup_safe("c:\\dir\\") + "[/i]", emoji=False).plain == "c:\\dir\\"
    assert unicodedata.category(inert("\u200b")) == "Cf"  # zero-width space is harmless and kept


def _as_json_reads(s: str) -> str:
    """`s` as any JSON reader gets it back: a high surrogate followed by a low one is, in JSON
    (`\\ud800\\udfff`), one character (json.dumps' own output reads back the same way)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


@settings(max_examples=300, deadline=None)
@given(hostile_text)
@example("\ud800\udfff")     # found by hypothesis: two lone surrogates that JSON reads as one pair
@example("a\ud800b\udfff")
def test_json_output_is_inert_on_a_terminal_and_lossless(s):
    import json

    from marinctl.cli.output import dumps

    out = dumps({"title": s, "nested": [s]})
    assert not any(_forbidden(c) for c in out)
    read = _as_json_reads(s)
    assert json.loads(out) == {"title": read, "nested": [read]}
    assert read == s or json.loads(json.dumps(s)) == read     # what JSON itself cannot keep apart


def test_trailing_backslash_before_a_final_newline_is_left_alone():
    # Regression (found by hypothesis): '$' matches before a final newline; '\Z' does not.
    assert markup_safe("a\\\n") == "a\\\n"
    assert Text.from_markup(markup_safe("a\\\x85"), emoji=False).plain == "a\\\n"
