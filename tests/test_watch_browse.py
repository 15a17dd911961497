"""Looking around in `watch`: pages of every metric, the grid, the filter's counts,
the palette jump, folding, the run and system panes, compared runs with a legend, a focused
chart's own log-y / y range / full screen, wheel zoom, and the layout remembered per store.

Keys and mouse go through Textual's Pilot on a real DuckDB file of SYNTHETIC runs
(tests/tui_store.py); every assertion reads the screen a person sees (tests/watch_pilot.py).
"""

from __future__ import annotations

import re
import shutil

import pytest

from marinctl.tui.widgets.sidebar import RunsSidebar
from tests.tui_store import build_watch_store
from tests.watch_pilot import open_watch, run_test, settle, until, wait_for_text

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def hero_db(tmp_path_factory):
    """The synthetic hero lineage + ladder, built once; tests copy it (settings live per store path)."""
    from marinctl.store import Store

    path = tmp_path_factory.mktemp("browse") / "marinctl.duckdb"
    build_watch_store(Store(path))
    return path


@pytest.fixture
def db(hero_db, tmp_path):
    dest = tmp_path / "marinctl.duckdb"
    shutil.copy(hero_db, dest)
    return dest


def keys_of(db) -> list[str]:
    from marinctl.store import Store
    from marinctl.store.lineage import resolve_target
    from marinctl.store.series import keys_of as read

    store = Store(db)
    with store.connect() as con:
        return read(con, resolve_target(con, "hero", stitched=True).run_pks)


def chart_of(app, key: str):
    """The first chart on screen that shows `key`."""
    from marinctl.tui.widgets.chart import MetricChart

    return next(c for c in app.query(MetricChart) if c.key == key)


def mouse(kind, widget, x: int, y: int = 4, button: int = 0):
    """A mouse event at (`x`, `y`) of `widget`, as a terminal reports it (Pilot has no wheel or drag)."""
    region = widget.region
    return kind(widget, x, y, 0, 0, button, False, False, False, region.x + x, region.y + y)


def view_line(text: str) -> str:
    return next((line for line in text.splitlines() if "smoothing:" in line), "")


async def ready(pilot) -> str:
    """The first frame with the key list loaded (the page count is known)."""
    await wait_for_text(pilot, " keys")
    return await settle(pilot)


async def test_pages_grid_filter_counts_and_the_layout_is_remembered(db):
    browsable = [k for k in keys_of(db) if not k.startswith(("_", "system/"))]
    router = [k for k in browsable if re.search("router", k)]
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        text = await ready(pilot)
        assert "page 1/" in view_line(text) and f"2×4 grid · {len(browsable)} keys" in view_line(text)
        assert "▾ overview (8 keys)" in text                        # the curated page first
        pages = int(re.search(r"page 1/(\d+)", view_line(text)).group(1))
        assert pages > 1
        await pilot.press("pagedown")
        text = await wait_for_text(pilot, f"page 2/{pages}")
        assert "▾ overview" not in text and "▾ eval/paloma/ (2 keys)" in text
        await pilot.press("greater_than_sign")
        await wait_for_text(pilot, f"page 3/{pages}")
        await pilot.press("pageup")
        await wait_for_text(pilot, f"page 2/{pages}")
        await pilot.press("c")                                     # 3 columns: fewer pages
        text = await wait_for_text(pilot, "3×4 grid")
        assert int(re.search(r"page \d+/(\d+)", view_line(text)).group(1)) < pages
        await pilot.press("v")                                     # 5 rows
        await wait_for_text(pilot, "3×5 grid")
        await pilot.press("slash", *"router", "enter")
        text = await wait_for_text(pilot, f"{len(router)} of {len(browsable)} keys match")
        assert "filter /router/" in view_line(text)
        await pilot.press("q")
    # the next launch on the same store comes back with the same grid and filter
    again = open_watch(db, "hero")
    async with run_test(again) as pilot:
        text = await wait_for_text(pilot, "3×5 grid", f"{len(router)} of {len(browsable)} keys match")
        assert "filter /router/" in view_line(text)


async def test_g_folds_the_section_and_a_click_on_its_header_unfolds_it(db):
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        await pilot.press("g")
        text = await wait_for_text(pilot, "▸ overview (8 keys)")
        assert "train/loss" not in text.split("▸ overview")[1].split("▾")[0]   # folded: no charts under it
        header = next(w for w in app.query(".section-header") if "overview" in str(w.render()))
        await pilot.click(header)
        await wait_for_text(pilot, "▾ overview (8 keys)")


async def test_palette_jumps_to_any_key(db):
    browsable = [k for k in keys_of(db) if not k.startswith(("_", "system/"))]
    far = [k for k in browsable if k.startswith("params/norm/stacked")][-1]     # far from the curated first page
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        text = await ready(pilot)
        assert far not in text
        await pilot.press("ctrl+p")
        await pilot.press(*f"key: {far}")
        await wait_for_text(pilot, f"key: {far}")
        await pilot.press("enter")
        text = await wait_for_text(pilot, far[-15:])            # titles keep a long key's end
        assert "page 1/" not in view_line(text)
        assert type(app.focused).__name__ == "MetricChart" and app.focused.key == far   # its chart has focus


async def test_i_shows_the_run_pane_and_its_search_filters_config(db):
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        await pilot.press("i")
        text = await wait_for_text(pilot, "run · hero", "Config (")
        assert "state" in text and "lineage" in text and "num_train_steps" in text
        total = int(re.search(r"Config \((\d+)\)", text).group(1))
        await pilot.click("#pane-search")
        await pilot.press(*"lr")
        text = await wait_for_text(pilot, f" of {total})")
        shown = int(re.search(r"Config \((\d+) of", text).group(1))
        assert 0 < shown < total and "min_lr_ratio" in text and "num_experts" not in text
        await pilot.press("escape")
        app.set_focus(None)
        await pilot.press("i")
        text = await settle(pilot)
        assert "Config (" not in text


async def test_a_run_pane_loaded_before_its_search_box_exists_is_drawn_once_it_does():
    """The pane's data can come (from a first read started before the screen) before the pane has
    composed its search box: `show` then raised NoMatches out of the message handler (seen in CI on
    `watch` opened with the run pane remembered open)."""
    from textual.app import App

    from marinctl.views.run_panes import RunPane
    from marinctl.tui.capture import screen_text
    from marinctl.tui.widgets.panes import RunPaneView

    class Host(App):
        def on_mount(self) -> None:
            pane = RunPaneView(id="run-pane")
            self.mount(pane)
            pane.show(RunPane("synthetic-run", [("state", "finished")], [("lr", "0.001")]))

    app = Host()
    async with app.run_test(size=(80, 20)) as pilot:
        await pilot.pause(0.1)
        text = screen_text(app)
    assert "finished" in text and "Config (1)" in text


async def test_focused_chart_has_its_own_log_y_y_range_and_full_screen(db):
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        loss = chart_of(app, "train/loss")
        await pilot.click(loss, offset=(20, 4))
        await settle(pilot)
        await pilot.press("y")
        text = await wait_for_text(pilot, "1 chart flipped")
        title = next(line for line in text.splitlines() if "train/loss" in line and "macro_loss" in line)
        assert "log" in title.split("macro_loss")[0]                 # only the loss chart says log
        await pilot.press("a")
        await wait_for_text(pilot, "y:fit")
        await pilot.press("f")
        text = await settle(pilot)
        assert "loss  " in text and "log y:fit" in text                # the loss chart alone
        assert "eval/paloma/macro_loss" not in text and "▾ overview" not in text
        await pilot.press("escape")
        await wait_for_text(pilot, "eval/paloma/macro_loss")


async def test_mouse_wheel_zooms_around_the_pointer(db):
    from textual import events

    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        loss = chart_of(app, "train/loss")
        loss.post_message(mouse(events.MouseScrollUp, loss, loss.size.width // 2))
        text = await wait_for_text(pilot, "steps ")
        lo, hi = (int(v.replace(",", "")) for v in re.search(r"steps ([\d,]+)–([\d,]+)", view_line(text)).groups())
        assert 0 < lo < hi < 799 and 300 <= hi - lo <= 500           # half the 800 steps, around the middle
        loss.post_message(mouse(events.MouseScrollDown, loss, loss.size.width // 2))
        await wait_for_text(pilot, "full range")


async def test_space_compares_a_sidebar_run_with_a_legend_and_x_alignment(db):
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        sidebar = app.query_one(RunsSidebar)
        sidebar.focus()
        index = next(i for i in range(sidebar.option_count) if "rung1" in str(sidebar.get_option_at_index(i).prompt))
        sidebar.highlighted = index
        await pilot.press("space")
        text = await wait_for_text(pilot, "comparing 1")
        legend = next(line for line in text.splitlines() if "d768" in line and "━" in line)
        assert "hero" in legend
        await pilot.press("x", "x")                                # tokens → fraction of each run's schedule
        text = await wait_for_text(pilot, "x: fraction")
        legend = next(line for line in text.splitlines() if "d768" in line and "━" in line)
        assert "no fraction axis" not in legend
        await pilot.press("space")                                 # again: taken off
        await until(pilot, lambda t: "comparing" not in view_line(t), "space again takes it off")
        await pilot.press("space")
        await wait_for_text(pilot, "comparing 1")
        # the palette's entries are the bindings' (tui/bindings.py): this one runs the sidebar's `delete`
        await pilot.press("ctrl+p")
        await pilot.press(*"Clear compared")
        await wait_for_text(pilot, "Clear compared runs", "take every compared run off the charts")
        await pilot.press("enter")
        await until(pilot, lambda t: "comparing" not in view_line(t), "the palette takes every compared run off")


async def test_click_and_drag_move_the_cursor_readout(db):
    from textual import events

    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        loss = chart_of(app, "train/loss")
        await pilot.click(loss, offset=(loss.size.width // 4, 4))
        text = await settle(pilot)
        first = int(re.search(r"▏step ([\d,]+)", text).group(1).replace(",", ""))
        assert 50 < first < 400                                     # a quarter of the way along 800 steps
        loss.post_message(mouse(events.MouseMove, loss, 3 * loss.size.width // 4, button=1))
        text = await settle(pilot)
        dragged = int(re.search(r"▏step ([\d,]+)", text).group(1).replace(",", ""))
        assert 400 < dragged < 799                                  # the readout followed the pointer


@pytest.mark.parametrize("kind", ["synced-rung", "local", "repro"])
async def test_layout_keys_and_panes_on_every_kind_of_run(tmp_path_factory, kind):
    """The new keys on a run synced from (fake) W&B, a local `.wandb` run and a repro run."""
    from tests.run_kinds import KINDS, kinds_home

    app = open_watch(kinds_home(tmp_path_factory) / "marinctl.duckdb", KINDS[kind])
    async with run_test(app) as pilot:
        text = await ready(pilot)
        pages = int(re.search(r"page 1/(\d+)", view_line(text)).group(1))
        await pilot.press("pagedown")
        await wait_for_text(pilot, f"page 2/{pages}" if pages > 1 else "last page of 1")
        await pilot.press("c")
        await wait_for_text(pilot, "3×4 grid")
        await pilot.press("i")
        text = await wait_for_text(pilot, "Config (")            # (the summary is below, scrolled)
        assert "source" in text and "steps" in text
        await pilot.press("i", "m")
        # the system pane itself (the key bar always says "system"): the fake W&B server's run has
        # sampled system metrics (tests/fakes/wandb_history.py); the SDK-written runs turn stats off
        shown = "system.gpu.0.gpu" if kind == "synced-rung" else "no system metrics stored for this run"
        text = await wait_for_text(pilot, "╭─ system", shown)
        assert "Config (" not in text                             # `i` again closed the run pane
        await pilot.press("slash", *"loss", "enter")
        await wait_for_text(pilot, "keys match")


async def test_readout_labels_tell_leaves_apart_by_their_shortest_suffix(db):
    """Two router_bias leaves never share a label (both once read `params/router_bias`)."""
    leaves = [k for k in keys_of(db) if k.endswith("router_bias")]
    assert len(leaves) >= 2
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        await pilot.press("slash", *"router_bias", "enter")
        text = await wait_for_text(pilot, f"{len(leaves)} of ")
        line = next(line for line in text.splitlines() if "▏step" in line)
        shown = re.findall(r"(\S*router_bias) ", line)
        assert len(shown) >= 2 and len(set(shown)) == len(shown)            # distinct labels
        for label in shown:                                                   # `grad/…0.mlp.router_bias`
            head, _, tail = label.rpartition("…")
            assert sum(k.startswith(head) and k.endswith(tail) for k in leaves) == 1
            assert len(label) < min(len(k) for k in leaves)


def pane_width(text: str) -> int:
    line = next(line for line in text.splitlines() if "╭─ run ·" in line)
    start = line.index("╭─ run ·")
    return line.index("╮", start) - start + 1


async def _resize_by_keys(pilot, before: int) -> int:
    await pilot.press("right_curly_bracket", "right_curly_bracket")
    assert pane_width(await settle(pilot)) == before + 12
    await pilot.press("left_curly_bracket")
    return 6


async def _resize_by_dragging_the_border(pilot, before: int) -> int:
    """As LEET's resizable panes: press on the pane's left border, drag, release."""
    from marinctl.tui import settings

    app, saved = pilot.app, []
    edge = app.size.width - before
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings, "save", lambda path, layout, save=settings.save: (saved.append(layout), save(path, layout)))
        await pilot.mouse_down(None, offset=(edge, 10))
        await pilot.hover(None, offset=(edge - 5, 10))
        await pilot.mouse_up(None, offset=(edge - 10, 10))
        assert pane_width(await settle(pilot)) == before + 10
    assert [layout.pane_width for layout in saved] == [before + 10]     # remembered once, on release
    await pilot.click(None, offset=(edge - 40, 20))           # a click elsewhere drags nothing
    return 10


@pytest.mark.parametrize("resize", [_resize_by_keys, _resize_by_dragging_the_border])
async def test_the_side_panes_resize_by_keys_and_by_mouse_and_are_remembered(db, resize):
    app = open_watch(db, "hero")
    async with run_test(app) as pilot:
        await ready(pilot)
        await pilot.press("i")
        before = pane_width(await wait_for_text(pilot, "╭─ run ·", "Config ("))
        wider = await resize(pilot, before)
        assert pane_width(await settle(pilot)) == before + wider
    again = open_watch(db, "hero")
    async with run_test(again) as pilot:                            # the run pane and its width come back
        assert pane_width(await wait_for_text(pilot, "╭─ run ·", "Config (")) == before + wider
