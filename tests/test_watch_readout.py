"""The cursor readout is exact: it names the step each value comes from and shows
the value logged there — never a bucket mean under a step label — with the bucket's envelope
beside it when zoomed out; keys logged every 10 steps say which earlier step they come from.

A SYNTHETIC run whose loss swings inside every bucket (so a bucket mean is never a logged
value), with a one-step spike on an anomaly marker, an eval key logged every 10 steps and a
system metric (the `m` pane). Keys are pressed through Pilot; the screen is compared with
the values written to the store. SVG snapshots of the run pane and the system pane close it.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pytest

from marinctl import numbers as N
from marinctl.tui.widgets.sidebar import RunsSidebar
from tests.watch_pilot import open_watch, run_test, screen, settle, until, wait_for_text

STEPS = 1000
SPIKE = 503
RUN_ID = "synthetic-exact"


def loss(s: int) -> float:
    return 9.0 if s == SPIKE else 3.0 + math.sin(s / 2.0)


def every10(s: int) -> float:
    return 1.0 + s / 1000.0


def build_exact_store(store) -> None:
    from marinctl.domain import RunInfo
    from marinctl.store import metrics, runs

    info = RunInfo(source="wandb", run_id=RUN_ID, entity="synthetic", project="exact", name=RUN_ID,
                   tags=["synthetic"], state="finished", config={"trainer": {"num_train_steps": STEPS}},
                   summary={"train/loss": loss(STEPS - 1), "best_eval": 1.0},
                   created_at=datetime(2026, 9, 1, tzinfo=timezone.utc),
                   heartbeat_at=datetime(2026, 9, 2, tzinfo=timezone.utc), remote_last_step=STEPS - 1)
    rows = [(s, "train/loss", loss(s)) for s in range(STEPS)]
    rows += [(s, "eval/every10", every10(s)) for s in range(0, STEPS, 10)]
    rows += [(s, "system/gpu.0.gpu", 50.0 + s % 7) for s in range(0, STEPS, 5)]
    batch = pa.table({"step": pa.array([r[0] for r in rows], pa.int64()), "key": [r[1] for r in rows],
                      "value": pa.array([r[2] for r in rows], pa.float64())}, schema=metrics.batch_schema())
    with store.transaction() as con:
        pk = runs.upsert_run(con, info)
        metrics.replace_range(con, pk, batch, 0, STEPS)
        con.execute("UPDATE runs SET last_step = ? WHERE run_pk = ?", [STEPS - 1, pk])
        con.execute("INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class)"
                    " VALUES (?, ?, 'train/loss', 'spike', 9.5, 'data_batch')", [pk, SPIKE])


@pytest.fixture
def exact(store):
    build_exact_store(store)
    return store


def readout(text: str) -> str:
    return next((line for line in text.splitlines() if "▏step" in line), "")


def cursor(line: str) -> int | None:
    m = re.search(r"▏step ([\d,]+)", line)
    return int(m.group(1).replace(",", "")) if m else None


def part(line: str, label: str) -> str:
    """`loss 3.48 [2.01…3.99]` out of the readout line."""
    m = re.search(rf"(?:^|\s){re.escape(label)} (\S+(?: @[\d,]+)?(?: \[[^\]]*\])?)", line)
    assert m, f"{label!r} not in {line!r}"
    return m.group(1)


@pytest.mark.asyncio
async def test_readout_names_the_logged_value_and_its_step(exact):
    app = open_watch(exact.path, RUN_ID)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "every10")
        await settle(pilot)
        await pilot.press("home", "right")
        before = cursor(readout(await wait_for_text(pilot, "▏step")))
        await pilot.press("right")
        line = readout(await until(pilot, lambda t: cursor(readout(t)) > before, "→ moves the cursor a bucket"))
        step = cursor(line)
        assert 0 < step < 100 and step % 10 != 0          # a bucket end that is no eval step
        got = part(line, "loss")
        value, _, env = got.partition(" [")
        assert value == N.sig(loss(step))                   # the value logged at that very step
        bucket = [loss(s) for s in range(before + 1, step + 1)]    # the cursor's bucket: after the last one's end
        assert N.sig(float(np.mean(bucket))) != value       # (which a bucket mean is not)
        lo, hi = env.rstrip("]").split("…")
        assert (lo, hi) == (N.sig(min(bucket)), N.sig(max(bucket)))   # the envelope beside it, zoomed out
        ten = step // 10 * 10
        assert part(line, "every10").startswith(f"{N.sig(every10(ten))} @{ten}")   # logged every 10 steps

        await pilot.press("n")                                # the anomaly marker: inside a bucket
        line = readout(await wait_for_text(pilot, f"▏step {SPIKE}"))
        assert part(line, "loss").split(" [")[0] == "9"      # the spike itself, not its bucket's mean
        assert part(line, "every10").startswith(f"{N.sig(every10(500))} @500")

        for _ in range(6):                                     # zoomed in to one step per bucket
            await pilot.press("plus")
            await settle(pilot)
        line = readout(screen(app))
        assert "[" not in part(line, "loss")                 # a bucket of one value has no envelope


@pytest.mark.asyncio
async def test_m_shows_system_metrics_in_their_own_pane(exact):
    app = open_watch(exact.path, RUN_ID)
    async with run_test(app) as pilot:
        text = await wait_for_text(pilot, "every10")
        assert "gpu.0.gpu" not in text                        # not in the grid
        await pilot.press("m")
        text = await wait_for_text(pilot, "system/gpu.0.gpu")
        assert "no system metrics" not in text


SIZE = (150, 46)


def _settled(key: str, shown: str):
    async def run_before(pilot):
        await wait_for_text(pilot, "every10")
        await settle(pilot)
        await pilot.press(key)
        await wait_for_text(pilot, shown)
        await settle(pilot)
        pilot.app.set_focus(None)          # the picture without focus or sidebar highlight (both
        pilot.app.query_one(RunsSidebar).highlighted = None   # depend on the order Textual settles focus in)
        await settle(pilot)
    return run_before


def test_snapshot_run_pane(exact, snap_compare):
    assert snap_compare(open_watch(exact.path, RUN_ID), terminal_size=SIZE, run_before=_settled("i", "Summary ("))


def test_snapshot_system_pane(exact, snap_compare):
    assert snap_compare(open_watch(exact.path, RUN_ID), terminal_size=SIZE, run_before=_settled("m", "system/gpu.0.gpu"))


@pytest.mark.asyncio
async def test_readout_is_exact_on_parquet_parts_too(store, tmp_path):
    """History kept as W&B's exported parquet parts (+ a long-row tail) reads the same way."""
    from marinctl.store import scan
    from marinctl.store.lineage import resolve_target
    from tests.fakes.load import load_as_parts
    from tests.fakes.synth import ladder_runs

    run = ladder_runs(300)[0]
    load_as_parts(store, [run], tmp_path / "export", tail=40, per_file=70)
    app = open_watch(store.path, run.run_id)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "▏step")
        await settle(pilot)
        await pilot.press("home", *["right"] * 5)                # well inside the parts
        text = await until(pilot, lambda t: (cursor(readout(t)) or 0) > 0, "→ moves the cursor")
        step = cursor(readout(text))
        assert 0 < step < 260
        with store.connect() as con:
            segments = resolve_target(con, run.run_id, stitched=True).segments
            steps, values = scan.arrays(con, segments, "train/loss", 0, step + 1)
        assert steps[-1] == step
        title = re.search(r"train/loss  (\S+)", await settle(pilot))         # the chart's title reads the cursor
        assert title and title.group(1) == N.sig(float(values[-1]))
