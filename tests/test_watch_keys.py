"""Every key of `watch` does what its help says, on every kind of run.

Keys are pressed through Textual's Pilot on a real store (tests/run_kinds.py: a synced ladder
rung, a local `.wandb` run, a repro-shaped run; all SYNTHETIC) and the test reads the screen a
person would see after each press: the help screen lists every binding; `y`, `s`, `x`, `o`
change what the view line says; the cursor keys move the readout; `+`/`-`/`[`/`]`/`0` zoom
and pan; `/` filters panels and `escape` clears; `n`/`p` jump to markers or say there are
none; `tab`/`enter` pick another run; `ctrl+p` opens the palette; `r` syncs or says why not;
`e` shows an explanation; `q` and `ctrl+c` quit. The app is built in tests/watch_pilot.py only.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time

import pytest

from tests.run_kinds import KINDS, SCHEDULES, TINY_ID, kinds_home, local_wandb_dir
from tests.watch_pilot import header, open_watch, run_test, screen, settle, until, wait_for_text

pytestmark = pytest.mark.asyncio

# Every key a person is told about (README's watch section, the help's own words), as the help
# screen writes it: the help is generated from the widgets' bindings, this list is not.
DOCUMENTED_KEYS = ["q", "^c", "?", "^p", "tab", "shift+tab", "/", "esc", "e", "y", "Y", "s", "x", "o", "r", "pgdn",
                   ">", "pgup", "<", "c", "C", "v", "V", "g", "G", "a", "f", "i", "m", "{", "}", "b", "w", "d", "←", "→",
                   "shift+←", "shift+→", "home", "end", "n", "p", "+", "-", "[", "]", "0", "enter", "space", "del"]
# What the key bar shows with the cursor bar focused (the start), in its order
KEY_BAR = ["quit", "help", "find", "explain", "log-y", "smooth", "x-axis", "overlays", "sync", "next page", "run",
           "system"]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return kinds_home(tmp_path_factory)


@pytest.fixture
def store_copy(home, tmp_path):
    """A writable copy of the store: `watch` syncs and writes into the one it shows."""
    dest = tmp_path / "watch-home"
    shutil.copytree(home, dest, ignore=shutil.ignore_patterns("*.locks"))
    return dest / "marinctl.duckdb"


def view_line(text: str) -> str:
    return next((line for line in text.splitlines() if "smoothing:" in line), "")


def cursor(text: str) -> int | None:
    m = re.search(r"▏step ([\d,]+)", text)
    return int(m.group(1).replace(",", "")) if m else None


def zoom_range(text: str) -> tuple[int, int] | None:
    m = re.search(r"steps ([\d,]+)\s*[–-]\s*([\d,]+)", view_line(text))
    return (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))) if m else None


async def press(pilot, *keys: str) -> str:
    await pilot.press(*keys)
    return await settle(pilot)


async def key(pilot, keys: str, pred, what: str) -> str:
    await pilot.press(*keys.split())
    return await until(pilot, pred, what)


def help_keys(text: str) -> set[str]:
    """The keys in the help's key column (`pgdn > / pgup <` → pgdn, >, pgup, <)."""
    found = set()
    for line in text.splitlines():
        m = re.match(r"\W*│\s+(\S.*?)\s{2,}\S", line)
        if m and "marinctl watch" not in m.group(1):
            found.update(k for k in m.group(1).replace(" / ", " ").split(" ") if k)
    return found


async def test_help_lists_every_key_binding(home):
    """`?` lists every key a person is told about, and every key the screen and its widgets bind."""
    from marinctl.tui.bindings import key_text
    from marinctl.tui.widgets.chart import MetricChart
    from marinctl.tui.screens.watch import WatchScreen
    from marinctl.tui.widgets.grid import ChartGrid
    from marinctl.tui.widgets.sidebar import RunsSidebar

    app = open_watch(home / "marinctl.duckdb", KINDS["local"])
    async with app.run_test(size=(150, 80)) as pilot:        # tall enough for the whole list
        await settle(pilot)
        text = await key(pilot, "question_mark", lambda t: "marinctl watch — keys" in t, "? opens the help")
        shown = help_keys(text)
        assert set(DOCUMENTED_KEYS) <= shown, f"missing from the help: {set(DOCUMENTED_KEYS) - shown}\n{text}"
        bound = {k for kind in (type(app), WatchScreen, ChartGrid, MetricChart, RunsSidebar)
                 for b in kind.BINDINGS for k in key_text(app, b).split()}
        assert bound <= shown, f"bound but not in the help: {bound - shown}"
        for where in ("anywhere", "the charts", "a focused chart", "the runs sidebar"):
            assert where in text, where
        await key(pilot, "escape", lambda t: "marinctl watch — keys" not in t, "escape closes the help")


def smoothing(text: str) -> str:
    m = re.search(r"smoothing: (\w+)", view_line(text))
    return m.group(1) if m else ""


def x_label(text: str) -> str:
    m = re.search(r"x: ([^·]+)", view_line(text))
    return m.group(1).strip() if m else ""


@pytest.mark.parametrize("kind", list(KINDS))
async def test_view_keys_change_what_the_screen_says(store_copy, kind):
    run = KINDS[kind]
    last = SCHEDULES[run]["last"]
    app = open_watch(store_copy, run)
    async with run_test(app) as pilot:
        text = await settle(pilot)
        assert run in header(text) and "full range" in view_line(text), text
        # y: log-y on and off
        await key(pilot, "y", lambda t: "log-y: on" in view_line(t), "y turns log-y on")
        await key(pilot, "y", lambda t: "log-y: off" in view_line(t), "y turns log-y off")
        # s: three smoothing modes, then back to the first
        seen = [smoothing(text)]
        for _ in range(3):
            text = await key(pilot, "s", lambda t, prev=seen[-1]: smoothing(t) not in ("", prev), "s changes smoothing")
            seen.append(smoothing(text))
        assert len(set(seen[:3])) == 3 and seen[3] == seen[0], seen
        # x: four axes, then back to steps
        labels = [x_label(text)]
        for _ in range(4):
            text = await key(pilot, "x", lambda t, prev=labels[-1]: x_label(t) not in ("", prev), "x changes the axis")
            labels.append(x_label(text))
        assert len(set(labels[:4])) == 4 and labels[4] == labels[0], labels
        # cursor keys move the readout
        await key(pilot, "home", lambda t: cursor(t) == 0, "home puts the cursor on step 0")
        await key(pilot, "end", lambda t: cursor(t) == last, f"end puts the cursor on step {last}")
        one = cursor(await key(pilot, "left", lambda t: (cursor(t) or last) < last, "left moves the cursor back"))
        ten = cursor(await key(pilot, "shift+left", lambda t: (cursor(t) or last) < one, "shift+left moves back"))
        assert last - ten > 5 * (last - one), (last, one, ten)       # ten buckets, not one
        await key(pilot, "right", lambda t: (cursor(t) or 0) > ten, "right moves the cursor on")
        # zoom and pan around the cursor
        text = await key(pilot, "end plus", lambda t: zoom_range(t) is not None, "+ zooms in")
        zoomed = zoom_range(text)
        assert zoomed[1] - zoomed[0] < last, view_line(text)
        text = await key(pilot, "left_square_bracket", lambda t: (zoom_range(t) or zoomed)[0] < zoomed[0], "[ pans left")
        left = zoom_range(text)
        await key(pilot, "right_square_bracket", lambda t: (zoom_range(t) or left)[0] > left[0], "] pans right")
        await key(pilot, "minus minus minus", lambda t: "full range" in view_line(t), "- zooms back out")
        await key(pilot, "plus", lambda t: zoom_range(t) is not None, "+ zooms in again")
        await key(pilot, "0", lambda t: "full range" in view_line(t), "0 resets the zoom")
        # /: a regex over every key; escape clears it
        await pilot.press("slash")
        await pilot.press(*"loss$")
        await key(pilot, "enter", lambda t: "filter /loss$/" in view_line(t) and "train/loss" in t
                  and "grad/norm/total" not in t, "/loss$ filters the panels")
        await key(pilot, "escape", lambda t: "filter" not in view_line(t) and "grad/norm/total" in t, "escape clears")
        # n / p: to the next / previous marker, or say there is none
        await key(pilot, "home", lambda t: cursor(t) == 0, "home")
        await key(pilot, "n", lambda t: cursor(t) != 0 or "no markers" in t, "n moves to a marker or says none")
        await key(pilot, "end", lambda t: cursor(t) == last, "end")
        await key(pilot, "p", lambda t: cursor(t) != last or "no markers" in t, "p moves to a marker or says none")
        # o: overlays on (on the fraction axis, said so) and off
        await key(pilot, "o", lambda t: "overlays on" in view_line(t) and "x: fraction" in view_line(t), "o: overlays")
        await key(pilot, "o", lambda t: "overlays on" not in view_line(t), "o again: overlays off")
        # ctrl+p: the command palette
        await key(pilot, "ctrl+p", lambda t: "Log-y" in t or "Search" in t, "ctrl+p opens the palette")
        await pilot.press("escape")
        # tab, enter: show another run picked in the sidebar
        text = await settle(pilot)
        first_line = header(text).splitlines()[0]
        await pilot.press("tab", "home", "enter")
        text = await settle(pilot)
        if header(text).splitlines()[0] == first_line:
            await pilot.press("down", "enter")
        await until(pilot, lambda t: header(t).splitlines()[0] != first_line, "tab + enter shows another run")


@pytest.mark.parametrize("kind", list(KINDS))
async def test_e_explains_the_step_under_the_cursor(home, kind):
    run = KINDS[kind]
    step = SCHEDULES[run]["last"]
    app = open_watch(home / "marinctl.duckdb", run)
    async with run_test(app) as pilot:
        await settle(pilot)
        await key(pilot, "end", lambda t: cursor(t) == step, "end")
        text = await key(pilot, "e", lambda t: f"step {step:,}" in t and re.search(
            r"(?i)explain|context|unusual|failed", t.split(f"step {step:,}", 1)[-1]), "e opens the explanation")
        text = await settle(pilot)
        assert "failed" not in text and "could not explain" not in text and "has no attribute" not in text, text
        assert "LR schedule" in text or "unusual" in text, text
        # a wrapped context line goes on under its value, never as a lone word at the panel's edge
        lines = text.splitlines()
        scheduled = [i for i, line in enumerate(lines) if "schedule     " in line]
        assert scheduled or kind != "synced-rung", text          # the rung's last step is near its phase switches
        for i in scheduled:
            value = lines[i].index("schedule     ") + len("schedule     ")
            rest = lines[i + 1]
            if not re.search(r"│\s*(\w+ ?\w*\s{2,}\S|$)", rest[:value + 1]):       # not the next labelled line
                assert rest[value - 1] == " " and rest[value] != " ", f"{lines[i]}\n{rest}"
        await key(pilot, "escape", lambda t: "LR schedule" not in t, "escape closes the explanation")


async def test_plus_on_a_short_run_says_why_nothing_happens(home):
    app = open_watch(home / "marinctl.duckdb", TINY_ID)
    async with run_test(app) as pilot:
        text = await settle(pilot)
        for _ in range(4):
            before = view_line(text)
            text = await press(pilot, "plus")
            if view_line(text) == before:
                break
        assert view_line(text) != before or re.search(r"(?i)(zoom|short|too few|steps)", text.split(view_line(text))[-1]), text


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_q_and_ctrl_c_quit(home, key):
    app = open_watch(home / "marinctl.duckdb", KINDS["repro"])
    async with run_test(app) as pilot:
        await settle(pilot)
        await pilot.press(key)
        deadline = time.monotonic() + 60          # a bound, not a measure: the quit is an event
        while app.is_running and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not app.is_running


async def test_r_on_a_local_run_syncs_its_file(store_copy):
    app = open_watch(store_copy, KINDS["local"])
    async with run_test(app) as pilot:
        await settle(pilot)
        text = await press(pilot, "r")
        await wait_for_text(pilot, "synced")
        text = screen(app)
    assert re.search(r"synced \d+ s ago", header(text)), header(text)


async def test_r_with_nothing_to_sync_says_so(cli, tmp_path_factory, tmp_path):
    """A local run whose files were moved away: `r` must say why nothing happens."""
    folder = next(d for d in local_wandb_dir(tmp_path_factory).iterdir() if d.name.endswith(TINY_ID))
    moved = shutil.copytree(folder, tmp_path / "moved" / folder.name)
    home = tmp_path / "r-home"
    assert cli("--home", str(home), "sync", str(moved))[0] == 0
    shutil.rmtree(moved)
    app = open_watch(home / "marinctl.duckdb", TINY_ID)
    async with run_test(app) as pilot:
        await settle(pilot)
        await key(pilot, "r", lambda t: re.search(r"(?i)nothing to sync|cannot sync|no longer", t), "r says why not")


@pytest.mark.parametrize("target", ["synced-rung", "never-synced"])
async def test_offline_sync_never_says_cache_from_never(store_copy, monkeypatch, target):
    """A W&B target whose sync fails says what it shows — the cache's time, or that
    nothing was synced yet — never "showing cache from never"."""
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MARINCTL_HTTP_ATTEMPTS", "1")
    ref = KINDS["synced-rung"] if target == "synced-rung" else "synthetic-lab/never-synced/nothing-synthetic"
    app = open_watch(store_copy, ref, interval=60, autosync=True)
    async with run_test(app) as pilot:
        text = await wait_for_text(pilot, "offline", timeout=60)
        text = await settle(pilot)
    assert "cache from never" not in text and "offline" in header(text), header(text)


async def test_r_while_offline_answers_every_press(store_copy, monkeypatch):
    """`r` with W&B out of reach ends in a toast naming the failure on every press: the header
    already said "offline", so a repeated failure used to change nothing on screen."""
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MARINCTL_HTTP_ATTEMPTS", "1")
    app = open_watch(store_copy, KINDS["synced-rung"], interval=600, autosync=True)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "offline", timeout=60)
        await settle(pilot)
        for _ in range(2):
            before = screen(app).count("127.0.0.1")
            await key(pilot, "r", lambda t, n=before: t.count("127.0.0.1") > n, "r answers with the failure")


def sidebar_labels(text: str) -> list[str]:
    """The run sidebar's entries as shown (state mark and last step included)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "╭─ runs" in line)
    out = []
    for line in lines[start + 1:]:
        if line.lstrip().startswith("╰"):
            break
        inner = line.split("│")[1] if line.count("│") >= 2 else ""
        if inner.strip():
            out.append(inner.strip())
    return out


async def test_sidebar_labels_are_unique(home):
    """No two entries of the run sidebar read the same."""
    app = open_watch(home / "marinctl.duckdb", KINDS["repro"])
    async with run_test(app) as pilot:
        labels = sidebar_labels(await settle(pilot))
    assert len(labels) >= 6 and len(set(labels)) == len(labels), labels


async def test_the_key_bar_shows_the_keys_and_a_click_presses_one(home):
    """The bottom line lists the shown bindings as Textual's Footer did, follows focus (the filter box
    has its own keys), and clicking a key does what pressing it does."""
    from marinctl.tui.widgets.footer import KeyFooter

    app = open_watch(home / "marinctl.duckdb", KINDS["local"])
    async with run_test(app) as pilot:
        text = await settle(pilot)
        bar = text.splitlines()[-1]
        assert [d for d in KEY_BAR if f" {d} " in bar + " "] == KEY_BAR, bar
        at = [(bar + " ").index(f" {d} ") for d in KEY_BAR]
        assert at == sorted(at), bar
        footer = app.query_one(KeyFooter)
        x = bar.index("? help") + 1
        await pilot.click(footer, offset=(x, 0))
        await until(pilot, lambda t: "marinctl watch — keys" in t, "a click on `? help` opens the help")
        await key(pilot, "escape", lambda t: "marinctl watch — keys" not in t, "escape closes the help")
        await key(pilot, "slash", lambda t: t.splitlines()[-1].split() != bar.split(), "the bar follows focus")


async def test_0_and_minus_at_full_range_say_nothing_moved(home):
    """At the full range `0` and `-` have nothing to undo: each press says so, and the view stays."""
    app = open_watch(home / "marinctl.duckdb", KINDS["local"])
    async with run_test(app) as pilot:
        text = await settle(pilot)
        assert "full range" in view_line(text), text
        for k in ("0", "minus"):
            text = await key(pilot, k, lambda t: "already showing every step" in t, f"{k} at full range says why")
            assert "full range" in view_line(text), text
            app.clear_notifications()
            await until(pilot, lambda t: "already showing every step" not in t, "the notice clears")


async def test_the_state_tells_its_listener_what_changed_and_nothing_else():
    """Every change of the view asked for is told (the screen reads on it, never remembers to);
    asking for what is already asked tells nothing, so nothing is read twice."""
    from marinctl.tui.paint import ChartState
    from marinctl.tui.state import WatchState
    from marinctl.views.watch_view import ViewParams

    told: list[tuple[frozenset, frozenset]] = []
    state = WatchState(ViewParams(ref="a"), ChartState(), lambda asked, drawn: told.append((asked, drawn)))
    assert state.ask(ref="a", page=0) == frozenset() and told == []
    assert state.ask(ref="b", page=0) == {"ref"} and state.params.ref == "b"
    assert told == [(frozenset({"ref"}), frozenset())]
    state.draw(logy=True)
    assert told[-1] == (frozenset(), frozenset({"logy"}))
