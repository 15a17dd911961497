"""The watch tests read what a person sees, not the app's insides.

A test that reads `app._page`, `app.view` or Textual's compositor breaks when the screen is
rebuilt and passes on what the code computed rather than on what was drawn. The screen's text is
read through tests/watch_pilot.py (`marinctl.tui.capture`, the one reader of the compositor).
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
FORBIDDEN = re.compile(r"\bapp\._|_compositor|\bapp\.(view|chart_state|params|refreshes|first_painted)\b|\bpilot\._")


def offenders(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.resolve() == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_no_test_reads_the_watch_app_s_private_state():
    assert offenders(TESTS) == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    """(A guard on the check itself: each forbidden read in a test file is found.)"""
    reads = ["app._page.charts", "pilot.app._sidebar", "app.screen._compositor", "app.view.panels",
             "app.chart_state.logy", "await pilot._post_mouse_events([], None)"]
    (tmp_path / "test_x.py").write_text("\n".join(f"x = {r}" for r in reads) + "\nok = app.screen\n")
    assert len(offenders(tmp_path)) == len(reads)
