"""The watch view-model, headless: spike-preserving envelopes, smoothing, axes, header, sidebar, markers.

Data is SYNTHETIC (tests/fakes/synth.py, or generate_series in DuckDB for the long series).
"""

from __future__ import annotations

import numpy as np
import pytest

from marinctl import rungs
from marinctl.views import chart_axis, chart_data, run_header, run_list, watch_view
from marinctl.analysis.schedule import schedule_of_target
from marinctl.store import metrics as M
from marinctl.store.lineage import resolve_target
from tests.tui_store import EVENT_STEP, SPIKE_STEP

LONG = 400_000
SPIKE_AT = 123_457


@pytest.fixture
def long_store(store):
    """One SYNTHETIC run with 400k steps of a smooth loss and a single one-step spike."""
    with store.transaction() as con:
        con.execute("INSERT INTO runs (uid, source, run_id, state) VALUES ('local:synthetic-long', 'local', 'synthetic-long', 'running')")
        con.execute("INSERT INTO metric_keys (key) VALUES ('train/loss')")
        con.execute(
            f"INSERT INTO metrics SELECT 1, 1, s, CASE WHEN s = {SPIKE_AT} THEN 50.0 ELSE 2.0 + 1.0 / (1 + s / 1000.0) END"
            f" FROM range({LONG}) t(s) ORDER BY s")
        con.execute("UPDATE runs SET last_step = ? WHERE run_pk = 1", [LONG - 1])
    return store


@pytest.mark.parametrize("window", [(0, LONG - 1), (100_000, 200_000), (123_000, 124_000), (123_450, 123_460)])
@pytest.mark.parametrize("buckets", [37, 200, 1000])
def test_one_step_spike_survives_downsampling_at_every_zoom(long_store, window, buckets):
    lo, hi = window
    with long_store.connect() as con:
        target = resolve_target(con, "synthetic-long")
        panel = chart_data.load_panel(con, target, "train/loss", lo, hi, buckets=buckets, smoothing="ema")
        env = M.downsample(con, target.segments, "train/loss", lo, hi + 1, buckets)
    assert len(panel) <= buckets
    assert np.nanmax(panel.vmax) == 50.0
    i = int(np.nanargmax(env.vmax))
    assert env.step_of_max[i] == SPIKE_AT
    assert env.step_lo[i] <= SPIKE_AT <= env.step_hi[i]
    # every other bucket stays on the smooth curve: the spike does not leak
    others = np.delete(panel.vmax, int(np.nanargmax(panel.vmax)))
    assert np.all(others < 3.01)
    # the cursor readout at the spike shows it as the bucket's max
    assert panel.value_at(SPIKE_AT)[2] == 50.0


def test_smoothing_ema_and_debiased_match_hand_computed_values():
    v = np.array([0.0, 1.0, 1.0])
    assert chart_data.smooth(v, "none").tolist() == [0.0, 1.0, 1.0]
    assert np.allclose(chart_data.smooth(v, "ema", 0.5), [0.0, 0.5, 0.75])
    # debiased: acc = 0, 0.5, 0.75; divided by 1 - 0.5^n = 0.5, 0.75, 0.875
    assert np.allclose(chart_data.smooth(v, "debiased", 0.5), [0.0, 0.5 / 0.75, 0.75 / 0.875])
    with_nan = chart_data.smooth(np.array([1.0, np.nan, 3.0]), "ema", 0.5)
    assert with_nan.tolist() == [1.0, 1.0, 2.0]


def test_axes_map_steps_to_tokens_fraction_and_wall_time(watch_store):
    with watch_store.connect() as con:
        hero = resolve_target(con, "hero")
        tokens = chart_axis.axis_for(con, hero, "tokens", 0, 799)
        frac = chart_axis.axis_for(con, hero, "fraction", 0, 799)
        wall = chart_axis.axis_for(con, hero, "wall", 0, 799)
        ts_steps, ts = M.series(con, hero.segments, "_timestamp")
    sched = schedule_of_target(hero)
    assert sched.total_steps == 800                       # the synthetic hero's num_train_steps
    assert tokens.x([10])[0] == 10 * sched.tokens_per_step
    assert frac.x([400])[0] == pytest.approx(0.5)
    assert frac.label.startswith("fraction of 800")
    # wall time: hours since the first timestamp, so ~19.8 s per synthetic step
    assert wall.mode == "wall"
    hours = wall.x([ts_steps[-1]])[0]
    assert hours == pytest.approx((ts[-1] - ts[0]) / 3600, rel=0.02)
    assert wall.step_at(wall.x([500])[0]) == pytest.approx(500, abs=5)


def test_header_stats_for_the_stitched_hero(watch_store):
    with watch_store.connect() as con:
        hero = resolve_target(con, "hero")
        stats = run_header.header_stats(con, hero)
    assert stats.step == 799 and stats.steps_done == 800 and stats.total_steps == 800     # steps 0..799
    assert stats.liveness == "stale"            # running, heartbeat months old
    assert stats.flops_budget == rungs.rung("hero")["flops"]
    assert (stats.phase_number, stats.phase_name) == (3, "cooldown")      # 799/800 is past the 0.8 switch
    assert 20 < stats.mfu < 25
    assert stats.eta_s == 0                              # every step of its schedule done


def test_steps_done_count_from_the_run_s_first_step():
    assert run_header.steps_done(631) == 632                  # a finished 632-step run's last step
    assert run_header.steps_done(631, first_step=0) == 632
    assert run_header.steps_done(632, first_step=1) == 632    # a run that counts from 1
    assert run_header.steps_done(None) is None


def test_liveness_from_state_and_heartbeat():
    from datetime import datetime, timedelta, timezone

    now = datetime(2026, 10, 1, tzinfo=timezone.utc)
    assert run_header.liveness("running", now - timedelta(minutes=2), now) == "live"
    assert run_header.liveness("running", now - timedelta(hours=2), now) == "stale"
    assert run_header.liveness("crashed", now, now) == "crashed"
    assert run_header.liveness("finished", None, now) == "finished"


def test_sidebar_lists_hero_lineage_then_rungs(watch_store):
    with watch_store.connect() as con:
        entries = run_list.sidebar_entries(con)
    kinds = [e.kind for e in entries]
    assert kinds[:4] == ["hero", "segment", "segment", "segment"]
    assert [e.label.split()[0] for e in entries if e.kind == "rung"] == ["rung1", "rung2", "rung3", "rung4"]
    assert entries[1].liveness == "crashed"        # the synthetic root crashed


def test_markers_land_on_their_panels(watch_store):
    with watch_store.connect() as con:
        hero = resolve_target(con, "hero")
        markers = chart_data.markers_for(con, hero, 0, 799)
        loss = chart_data.load_panel(con, hero, "train/loss", 0, 799, markers=markers)
        lr = chart_data.load_panel(con, hero, "optim/learning_rate", 0, 799, markers=markers)
    assert {(m.kind, m.step) for m in markers} == {("anomaly", SPIKE_STEP), ("event", EVENT_STEP)}
    assert {m.kind for m in loss.markers} == {"anomaly", "event"}
    assert {m.kind for m in lr.markers} == {"event"}       # anomalies only on their own metric


def test_build_view_with_filter_and_overlays(watch_store):
    view = watch_view.build_view(watch_store, watch_view.ViewParams(ref="hero", pattern=r"router/routing_entropy_mean$"))
    assert [p.key for p in view.panels] == ["train/router/routing_entropy_mean"]
    view = watch_view.build_view(watch_store, watch_view.ViewParams(ref="hero", xmode="fraction", overlays=True))
    names = {o.name for o in view.panels[0].overlays}
    assert names == {"d768", "d1024", "d1536", "d2048"}
    ov = view.panels[0].overlays[0]
    assert 0 <= ov.x.min() and ov.x.max() <= 1.0
    assert view.error is None and view.full_hi == 799


def test_plot_prints_a_chart_without_textual(watch_store, cli, monkeypatch):

    code, out, err = cli("--db", str(watch_store.path), "plot", "train/loss", "--width", "80", "--height", "16")
    assert code == 0, err
    assert "train/loss — hero" in out and "\x1b[" not in out
    assert len(out.splitlines()) >= 14
    assert "⠀" in out or any(ch in out for ch in "⡇⠑⢄⣀")      # braille curve
    code, out, err = cli("--db", str(watch_store.path), "plot", "train/los")
    assert code == 2 and "did you mean train/loss" in err


def test_plot_process_does_not_import_textual(watch_store, tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom marinctl.cli import main\n"
            f"try:\n    main(['--db', {str(watch_store.path)!r}, 'plot', 'train/loss', '--width', '60'])\n"
            "except SystemExit:\n    pass\n"
            "print('TEXTUAL', sorted(m for m in sys.modules if m.startswith('textual')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "TEXTUAL []"


def test_repro_run_overlays_the_rung_it_reproduces(watch_store):
    """A SYNTHETIC local repro of d768 appears over rung1 on the fraction axis."""
    from marinctl.domain import RunInfo
    from marinctl.store.runs import upsert_run

    with watch_store.transaction() as con:
        pk = upsert_run(con, RunInfo(source="repro", run_id="repro-d768-synthetic", name="repro d768 (synthetic)",
                                     state="running", config={"num_train_steps": 100}))
        con.execute("INSERT INTO metrics SELECT ?, (SELECT key_id FROM metric_keys WHERE key = 'train/loss'), s, 5.0 - s / 50"
                    " FROM range(50) t(s)", [pk])
        con.execute("UPDATE runs SET last_step = 49 WHERE run_pk = ?", [pk])
    view = watch_view.build_view(watch_store, watch_view.ViewParams(ref="rung1", xmode="fraction", overlays=True))
    loss = next(p for p in view.panels if p.key == "train/loss")
    names = [o.name for o in loss.overlays]
    assert "repro d768" in names and "d768" not in names          # the rung itself is the main curve
    repro = loss.overlays[names.index("repro d768")]
    assert repro.x.max() <= 0.5 and repro.y[0] == pytest.approx(5.0, abs=0.1)   # 50 of 100 steps done


def test_ladder_band_appears_over_the_hero_when_the_ladder_module_provides_one(watch_store, monkeypatch):
    import sys
    import types

    def predicted_band(con, metric):
        if metric != "train/loss":
            return None
        return {"steps": [0, 400, 799], "lo": [3.0, 2.5, 2.2], "hi": [3.4, 2.9, 2.6]}

    monkeypatch.setitem(sys.modules, "marinctl.analysis.scaling.ladder", types.SimpleNamespace(
        predicted_band=predicted_band, DEFAULT_METRIC="eval/paloma/macro_loss", DEFAULT_LEVEL=0.9))
    view = watch_view.build_view(watch_store, watch_view.ViewParams(ref="hero", xmode="fraction", overlays=True))
    bands = {p.key: p.band for p in view.panels}
    assert bands["grad/norm/total"] is None
    band = bands["train/loss"]
    assert band.x.tolist() == pytest.approx([0.0, 0.5, 799 / 800])
    assert band.hi.tolist() == [3.4, 2.9, 2.6]
    monkeypatch.setitem(sys.modules, "marinctl.analysis.scaling.ladder", None)       # absent: no band, no error
    view = watch_view.build_view(watch_store, watch_view.ViewParams(ref="hero", overlays=True, xmode="fraction"))
    assert all(p.band is None for p in view.panels)


def test_plot_of_values_equal_but_for_rounding_has_short_y_labels(store, cli):
    """A SYNTHETIC series logged as 3.9417606500654356 and 3.941760650065436 (a memory percentage
    read twice): plotext labelled that range with 19 digits, squeezing the chart (and in watch's
    system pane cutting its title). Drawn as a constant is: short labels around the value."""
    with store.transaction() as con:
        con.execute("INSERT INTO runs (uid, source, run_id, state) VALUES ('local:synthetic-flat', 'local', 'synthetic-flat', 'finished')")
        con.execute("INSERT INTO metric_keys (key) VALUES ('synthetic/flat')")
        con.execute("INSERT INTO metrics SELECT 1, 1, s, CASE WHEN s % 3 = 0 THEN 3.9417606500654356 ELSE 3.941760650065436 END"
                    " FROM range(40) t(s) ORDER BY s")
        con.execute("UPDATE runs SET last_step = 39 WHERE run_pk = 1")
    code, out, err = cli("--db", str(store.path), "plot", "synthetic/flat", "--run", "synthetic-flat", "--width", "60",
                         "--height", "12")
    assert code == 0, err
    labels = [line.split("┤")[0].strip() for line in out.splitlines() if "┤" in line]
    assert labels and all(len(label) <= 6 for label in labels), out
    assert any(label.startswith("3.9") for label in labels), out


@pytest.fixture
def short_store(store):
    """One SYNTHETIC short run: three curated keys, six others and a system key, 300 steps. With its
    key list its first page also charts grad/norm/total and optim/learning_rate in their own sections."""
    keys = ["train/loss", "grad/norm/total", "optim/learning_rate", *(f"synthetic/k{i}" for i in range(6)),
            "system/cpu"]
    with store.transaction() as con:
        con.execute("INSERT INTO runs (uid, source, run_id, state) VALUES ('local:synthetic-short', 'local',"
                    " 'synthetic-short', 'finished')")
        for key_id, key in enumerate(keys, start=1):
            con.execute("INSERT INTO metric_keys (key) VALUES (?)", [key])
            con.execute(f"INSERT INTO metrics SELECT 1, {key_id}, s, {key_id} + sin(s / 30.0) FROM range(300) t(s)")
        con.execute("UPDATE runs SET last_step = 299 WHERE run_pk = 1")
    return store


@pytest.mark.parametrize("stored, params, same_charts", [
    ("watch_store", dict(ref="hero"), True), ("watch_store", dict(ref="rung1"), True),
    ("watch_store", dict(ref="hero", cols=1, rows=3), True), ("watch_store", dict(ref="hero", system=True), True),
    ("watch_store", dict(ref="hero", page=1), False),
    ("short_store", dict(ref="synthetic-short"), True), ("short_store", dict(ref="synthetic-short", system=True), False)])
def test_a_view_given_its_key_list_is_the_view_read_with_it(request, stored, params, same_charts):
    """The first-read helper sends a long run's view before its key list, then the same view knowing
    the keys without reading the store again (`with_keys`). Where the keys bring other charts (a later
    page; system keys with the system pane open) it gives up (None) and the view is read with them.
    On the short run a curated key is also charted in its own section: its panel is listed twice."""
    from dataclasses import replace

    store = request.getfixturevalue(stored)
    base = watch_view.ViewParams(buckets=120, **params)
    keys = watch_view.key_list(store, base.ref)
    keyed = watch_view.with_keys(watch_view.build_view(store, base), keys)
    assert (keyed is not None) == same_charts
    if keyed is None:
        return
    read = watch_view.build_view(store, replace(base, all_keys=tuple(keys)))
    for field in ("params", "pages", "page", "sections", "matched", "total_keys", "system_keys", "labels",
                  "page_of_key", "lo", "hi"):
        assert getattr(keyed, field) == getattr(read, field), field
    assert [p.key for p in keyed.panels] == [p.key for p in read.panels]
    assert all(a.same_as(b) for a, b in zip(keyed.panels, read.panels))
    if stored == "short_store":
        assert [p.key for p in read.panels].count("grad/norm/total") == 2 and keyed.system_keys == 1


def test_same_picture_ignores_only_last_bit_differences_in_the_smoothed_line():
    """Two reads of the same rows: DuckDB sums a bucket in parallel, so the bucket means (the smoothed
    line) may differ in the last bit; that is the same picture. Any logged value differing is not."""
    from dataclasses import replace

    steps = np.arange(10.0)
    line = 2.0 + 1.0 / (1 + steps)
    panel = chart_data.PanelData("train/loss", steps, steps, line - 0.1, line + 0.1, line, "step",
                                 step_hi=steps, last=line)
    assert panel.same_as(replace(panel, line=np.nextafter(line, np.inf)))
    assert not panel.same_as(replace(panel, line=line * (1 + 1e-9)))
    assert not panel.same_as(replace(panel, vmax=np.nextafter(line + 0.1, np.inf)))
    assert not panel.same_as(replace(panel, last=np.nextafter(line, np.inf)))
