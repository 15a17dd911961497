"""Untrusted text made inert before it reaches a terminal.

Run names, config values, issue titles, comments and commit messages come from
strangers. Before marinctl prints or displays them, terminal escape sequences (CSI,
OSC including OSC 8 hyperlinks and OSC 52 clipboard writes, DCS/APC/PM/SOS strings),
every other C0/C1 control character, and Unicode bidi overrides/isolates are removed,
so nothing a stranger writes can move the cursor, retitle the window, write the
clipboard or reorder what the reader sees. `markup_safe` additionally escapes Rich /
Textual markup for widgets that interpret it.
"""

from __future__ import annotations

import re

# ESC-introduced sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC strings up to ST or BEL
# (or to the end of the text when unterminated), and two-byte ESC sequences.
_ESC_STRING = re.compile(r"\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\|$)", re.S)
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?")
_ESC_OTHER = re.compile(r"\x1b[ -/]*[0-~]?")
# 8-bit C1 equivalents: CSI (0x9b), OSC (0x9d), DCS (0x90), SOS (0x98), PM (0x9e), APC (0x9f)
_C1_STRING = re.compile(r"[\x90\x98\x9d\x9e\x9f][^\x07\x9c\x1b]*(?:\x07|\x9c|$)", re.S)
_C1_CSI = re.compile(r"\x9b[0-?]*[ -/]*[@-~]?")
# Remaining controls: C0 except TAB and LF, DEL, C1; bidi embeddings/overrides/isolates and marks.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def inert(text: object, *, single_line: bool = False) -> str:
    """Return `text` with escape sequences, control characters and bidi controls removed."""
    s = "" if text is None else str(text)
    s = s.replace("\r\n", "\n")
    s = _ESC_STRING.sub("", s)
    s = _CSI.sub("", s)
    s = _ESC_OTHER.sub("", s)
    s = _C1_STRING.sub("", s)
    s = _C1_CSI.sub("", s)
    s = _CONTROLS.sub("", s)
    if single_line:
        s = " ".join(s.split())
    return s


def markup_safe(text: object, *, single_line: bool = False) -> str:
    """`inert` plus Rich/Textual markup escaping, for widgets that parse markup."""
    s = inert(text, single_line=single_line)
    # Rich markup opens with '[': escape every '[' so no tag can form.
    return s.replace("\\", "\\\\").replace("[", r"\[")
