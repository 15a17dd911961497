"""Untrusted text made inert before it reaches a terminal.

Run names, config values, issue titles, comments and commit messages come from
strangers. Before marinctl prints or displays them, terminal escape sequences (CSI,
OSC including OSC 8 hyperlinks and OSC 52 clipboard writes, DCS/APC/PM/SOS strings),
every other C0/C1 control character, and Unicode bidi overrides/isolates/marks are
removed, so nothing a stranger writes can move the cursor, retitle the window, write the
clipboard or reorder what the reader sees. Lone surrogates (possible in JSON `\\ud800`
escapes) become U+FFFD so printing can never raise.

`markup_safe` additionally escapes markup for widgets that interpret it. Rich and
Textual parse backslashes differently, so it takes a `dialect`:
- `rich` (default): escapes every `[` that could open a Rich tag and doubles the
  backslashes in front of it (what `rich.markup.escape` does), plus a trailing run of
  backslashes, so the result can be concatenated with markup tags safely.
  Render with `emoji=False`: Rich's `:name:` emoji codes cannot be escaped.
- `textual`: Textual treats every unescaped `[` as a tag and only `\\[` as an escape,
  so every `[` is escaped and backslashes are left alone. Prefer `Content(text)`
  (no markup) in widgets; use this only where markup must be built from parts.
"""

from __future__ import annotations

import re

# ESC-introduced strings: OSC/DCS/SOS/PM/APC up to ST (ESC \ or 0x9c) or BEL, or to the
# end of the text when unterminated (so an unterminated OSC 8/52 payload is dropped).
_ESC_STRING = re.compile(r"\x1b[\]P^_X][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c|\Z)", re.S)
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?")
_ESC_OTHER = re.compile(r"\x1b[ -/]*[0-~]?")
# 8-bit C1 equivalents: CSI (0x9b), OSC (0x9d), DCS (0x90), SOS (0x98), PM (0x9e), APC (0x9f)
_C1_STRING = re.compile(r"[\x90\x98\x9d\x9e\x9f][^\x07\x9c\x1b]*(?:\x07|\x9c|\x1b\\|\Z)", re.S)
_C1_CSI = re.compile(r"\x9b[0-?]*[ -/]*[@-~]?")
# Remaining controls: C0 except TAB and LF, DEL, C1; bidi embeddings/overrides/isolates and marks.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f" + BIDI + "]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")
_LINE_SEPARATORS = re.compile(r"[\u2028\u2029\x85]")

# Rich opens a tag at '[' followed by [a-z#/@] and closed by ']' with no '[' between.
# Every '[' with the backslashes before it. Rich treats them differently when a tag could
# follow (backslashes pair up) and when not (only '\[' -> '[' is replaced).
_RICH_TAG = re.compile(r"(\\*)\[(?=([a-z#/@][^[]*?])?)")
_TRAILING_BACKSLASHES = re.compile(r"(\\+)\Z")


def inert(text: object, *, single_line: bool = False) -> str:
    """Return `text` with escape sequences, control characters and bidi controls removed."""
    s = "" if text is None else str(text)
    s = _SURROGATES.sub("\ufffd", s)
    s = s.replace("\r\n", "\n")
    s = _LINE_SEPARATORS.sub("\n", s)
    s = _ESC_STRING.sub("", s)
    s = _CSI.sub("", s)
    s = _ESC_OTHER.sub("", s)
    s = _C1_STRING.sub("", s)
    s = _C1_CSI.sub("", s)
    s = _CONTROLS.sub("", s)
    if single_line:
        s = " ".join(s.split())
    return s


_JSON_UNSAFE = re.compile("[\x7f-\x9f" + BIDI + "\u2028\u2029\ud800-\udfff]")


def json_safe(encoded: str) -> str:
    """Escape, inside already-encoded JSON, what `json.dumps(ensure_ascii=False)` leaves raw.

    DEL, C1 controls (0x9b is an 8-bit CSI), bidi controls, line separators and lone
    surrogates become `\\uXXXX` escapes: lossless for JSON readers, inert on a terminal.
    (JSON already escapes C0 controls, including ESC.)
    """
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", encoded)


def markup_safe(text: object, *, single_line: bool = False, dialect: str = "rich") -> str:
    """`inert` plus markup escaping, for widgets that parse markup (see module doc)."""
    s = inert(text, single_line=single_line)
    if dialect == "textual":
        return s.replace("[", "\\[")
    if dialect != "rich":
        raise ValueError(f"unknown markup dialect {dialect!r}")
    s = _RICH_TAG.sub(lambda m: (m.group(1) * 2 if m.group(2) else m.group(1)) + "\\[", s)
    return _TRAILING_BACKSLASHES.sub(lambda m: m.group(1) * 2, s)
