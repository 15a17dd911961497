"""Text from strangers on the watch screen is shown as text (marinctl/text.py).

Run names, config and summary values and GitHub event titles come from whoever wrote them. A
SYNTHETIC run whose name, config, summary and event title carry Rich/Textual markup (`[bold red]`,
`[link=…]`), ANSI and OSC escapes (colour, an OSC 8 hyperlink, an OSC 52 clipboard write), control
characters, a bidi override and a very long string is opened with Pilot: the sidebar, the header,
the run pane (and its border title), the readout, the explain panel, a toast and the legend show
the markup as written, no escape or control character reaches the terminal, and the boxes keep
their borders.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from tests.watch_pilot import open_watch, wait_for_text

pytestmark = pytest.mark.asyncio

MARKUP = "[bold red]bold?[/bold red] [link=https://evil.example/x]link?[/link]"
ESCAPES = "\x1b[31mred?\x1b[0m \x1b]8;;https://evil.example/x\x07osc8?\x1b]8;;\x07 \x1b]52;c;ZXZpbA==\x07bell\x07\x08?"
BIDI = "\u202egnp.exe"
LONG = "long-" * 120
RUN_ID = "[b]run[/b]\x1b[2J-\u202eSYNTHETIC"            # no "/": a run id, not an ENTITY/PROJECT/RUN path
EVENT_STEP = 50
SIZE = (160, 48)


@pytest.fixture
def hostile(store):
    from marinctl.domain import RunInfo
    from marinctl.store.runs import upsert_run

    info = RunInfo(source="local", run_id=RUN_ID, name=f"{MARKUP} {ESCAPES}", state="finished", tags=["synthetic"],
                   config={"trainer": {"num_train_steps": 100}, "hostile": f"{MARKUP} {ESCAPES} {BIDI}",
                           f"{MARKUP}-key": LONG},
                   summary={"note": f"{ESCAPES} {MARKUP}"})
    with store.transaction() as con:
        pk = upsert_run(con, info)
        con.execute("INSERT INTO metric_keys (key) VALUES ('train/loss')")
        con.execute("INSERT INTO metrics SELECT ?, 1, s, 5.0 - s / 50 FROM range(100) t(s)", [pk])
        con.execute("UPDATE runs SET last_step = 99 WHERE run_pk = ?", [pk])
        con.execute("INSERT INTO events (event_id, source, kind, time, title, run_uid, step) VALUES"
                    " ('github:synthetic/hostile#1', 'github', 'comment', ?, ?, ?, ?)",
                    [datetime(2026, 9, 3, tzinfo=timezone.utc), f"{MARKUP} {ESCAPES} {BIDI} {LONG}", info.uid,
                     EVENT_STEP])
    return store


def readout(text: str) -> str:
    return next((line for line in text.splitlines() if "▏step" in line), "")


def inert_everywhere(text: str) -> None:
    """No escape or control character reached the screen (only newlines between its lines)."""
    bad = sorted({f"U+{ord(c):04X}" for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) < 0xA0
                  or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"})
    assert bad == [], bad
    assert "31m" not in text and "]8;;" not in text and "]52;" not in text and "ZXZpbA" not in text


def box_intact(text: str, title: str) -> None:
    """Every line of the box titled `title` ends where its top border does."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if f"╭─ {title}" in line)
    left = lines[top].index(f"╭─ {title}")
    right = lines[top].index("╮", left)
    for line in lines[top + 1:]:
        assert len(line) > right and line[left] in "│╰" and line[right] in "│╯▇▄▂", (title, line)
        if line[left] == "╰":
            return
    raise AssertionError(f"the {title} box never closes")


async def test_hostile_text_is_shown_as_text(hostile):
    app = open_watch(hostile.path)             # the only run stored
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        text = await wait_for_text(pilot, "▏step", "train/loss")
        inert_everywhere(text)
        sidebar = "\n".join(line[:34] for line in text.splitlines())
        assert "[b]run[/b]" in sidebar                         # the run id as written, not bold
        assert "run [b]run[/b]-" in text                       # the header's too
        box_intact(text, "runs")

        await pilot.press("i")                                 # the run pane: name, config, summary
        text = await wait_for_text(pilot, "Config (3)", "run · [b]run[/b]-")   # its border title too
        inert_everywhere(text)
        assert "[bold red]bold?[/bold red]" in text and "[link=https://evil" in text
        assert "red?" in text and "osc8?" in text             # what the escapes wrapped is still read
        box_intact(text, "run ·")
        await pilot.click("#pane-search")
        await pilot.press(*"note")
        text = await wait_for_text(pilot, "Summary (1 of ")
        inert_everywhere(text)
        note = text.split("Summary (1 of ")[1]                 # (folded over the value column's lines)
        assert "[bold" in note and "[link=" in note and "red?" in note, note
        box_intact(text, "run ·")
        await pilot.press("escape")                            # back to the charts

        await pilot.press("i", "home", "n")                    # the pane closed, the cursor on the event
        text = await wait_for_text(pilot, f"▏step {EVENT_STEP}")
        assert "│ comment: [bold red]bold?" in readout(text), readout(text)   # the readout names the marker
        inert_everywhere(text)
        await pilot.press("e")                                 # the explain panel lists the event
        text = await wait_for_text(pilot, f"event @{EVENT_STEP}")
        inert_everywhere(text)
        line = next(line for line in text.splitlines() if f"event @{EVENT_STEP}" in line)
        assert "[bold red]bold?[/bold red]" in line, line
        await pilot.press("escape")


async def test_a_hostile_run_compared_is_named_as_written(hostile):
    """The toast naming a compared run, and the legend, show its id as written."""
    from marinctl.domain import RunInfo
    from marinctl.store.runs import upsert_run

    with hostile.transaction() as con:
        pk = upsert_run(con, RunInfo(source="local", run_id="plain-synthetic", state="finished",
                                     config={"trainer": {"num_train_steps": 100}}))
        con.execute("INSERT INTO metrics SELECT ?, 1, s, 4.0 - s / 50 FROM range(100) t(s)", [pk])
        con.execute("UPDATE runs SET last_step = 99 WHERE run_pk = ?", [pk])
    app = open_watch(hostile.path, "plain-synthetic")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for_text(pilot, "▏step", "train/loss")
        await pilot.press("tab")
        sidebar = app.query_one("#sidebar")
        index = next(i for i in range(sidebar.option_count) if "[b]run[/b]" in str(sidebar.get_option_at_index(i).prompt))
        sidebar.highlighted = index
        await pilot.press("space")
        text = await wait_for_text(pilot, "comparing with")      # the toast, at once
        inert_everywhere(text)
        toast = next(line for line in text.splitlines() if "comparing with" in line)
        assert re.search(r"comparing with local:\[b\]run\[/b\]-SYNTHETIC", toast), toast
        text = await wait_for_text(pilot, "comparing 1", "━ plain-synthetic")
        inert_everywhere(text)
        legend = next(line for line in text.splitlines() if "━ plain-synthetic" in line)
        assert "[b]run[/b]" in legend, legend
