"""Ladder fits: Marin's published v16 isoFLOP table (acceptance), CLI contract, bad input, and an
online fit over SYNTHETIC rungs written through the store API."""

from __future__ import annotations

import json

import numpy as np
import pytest

V16 = [(1e18, 3.5273), (3e18, 3.3398), (1e19, 3.1494), (3e19, 3.0066), (1e20, 2.8509), (3e20, 2.7222)]


def _csv(tmp_path, rows, name="pts.csv"):
    p = tmp_path / name
    p.write_text("compute,loss,name\n" + "".join(f"{c},{y},p{i}\n" for i, (c, y) in enumerate(rows)))
    return str(p)


def test_published_v16_table_recovers_marins_constants_and_projects_1e21():
    from marinctl.analysis.scaling.ladder import fit_power_law

    fit = fit_power_law([c for c, _ in V16], [y for _, y in V16], pin=1.6)
    assert fit.A == pytest.approx(95.18, rel=0.01)
    assert fit.alpha == pytest.approx(0.0941, rel=0.005)
    assert float(fit.predict(1e21)) == pytest.approx(2.599, rel=0.01)
    assert float(fit.predict(1e21)) == pytest.approx(2.606, abs=0.002)  # Marin's own projection
    lo, hi = fit.band(1e21)
    assert lo[0] < float(fit.predict(1e21)) < hi[0] and hi[0] - lo[0] < 0.02


def test_free_fit_recovers_a_known_law():
    from marinctl.analysis.scaling.ladder import fit_power_law

    c = np.logspace(18, 22, 8)
    y = 1.7 + 80.0 * c ** -0.09
    fit = fit_power_law(c, y)
    assert not fit.pinned
    assert fit.L_inf == pytest.approx(1.7, abs=0.02)
    assert fit.alpha == pytest.approx(0.09, rel=0.03)


def test_cli_points_json(cli, tmp_path):
    code, out, err = cli("ladder", "--points", _csv(tmp_path, V16), "--pin", "1.6", "--predict", "1e21", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fit"]["A"] == pytest.approx(95.18, rel=0.01)
    assert doc["fit"]["alpha"] == pytest.approx(0.0941, rel=0.005)
    assert doc["fit"]["L_inf"] == 1.6
    [pred] = doc["predictions"]
    assert pred["compute"] == 1e21 and pred["loss"] == pytest.approx(2.599, rel=0.01)
    assert pred["lo"] <= pred["loss"] <= pred["hi"]
    assert [r["name"] for r in doc["rungs"]] == [f"p{i}" for i in range(6)]


def test_cli_offline_uses_published_table_and_says_so(cli):
    code, out, err = cli("ladder", "--pin", "1.6")
    assert code == 0, err
    assert "published v16 isoFLOP" in err
    assert "A = 95.7" in out and "2.7e+24" in out
    assert "log10 compute" in out and "\x1b[" not in out  # chart, no colour codes


@pytest.mark.parametrize("rows, needle", [
    ([(1e18, 3.5), (0, 3.3), (1e19, 3.1)], "compute must be positive"),
    ([(1e18, 3.5), (1e19, 3.1)], "at least three points"),
])
def test_bad_points_exit_2(cli, tmp_path, rows, needle):
    code, out, err = cli("ladder", "--points", _csv(tmp_path, rows))
    assert code == 2 and needle in err and len(err.strip().splitlines()) <= 2


def test_missing_points_file_exit_2(cli, tmp_path):
    code, _, err = cli("ladder", "--points", str(tmp_path / "nope.csv"))
    assert code == 2 and "cannot read points file" in err


# --- online: SYNTHETIC rungs in a real store ---------------------------------------------------

LAW = (1.6, 95.0, 0.094)  # synthetic ground truth for the final loss


def _synthetic_loss(c, f):
    """SYNTHETIC: final loss from LAW, higher earlier in the schedule."""
    linf, a, al = LAW
    return linf + a * c ** -al * (1.0 + 0.6 * (1.0 - f))


def _load_synthetic_ladder(store, hero_dev=0.03, hero_fraction=0.25):
    from marinctl import rungs
    from marinctl.domain import RunInfo
    from marinctl.store.metrics import replace_range
    from marinctl.store.runs import upsert_run
    import pyarrow as pa

    rng = np.random.default_rng(0)
    key = "eval/paloma/macro_loss"
    with store.transaction() as con:
        for r in rungs.rungs():
            if r["rung"] == "hero":
                continue
            pk = upsert_run(con, RunInfo(source="wandb", entity="synthetic", project="synthetic",
                                         run_id=f"ladder-{r['name']}-synthetic", name=f"synthetic-{r['name']}",
                                         group="moe-hero-ep-scaling-ladder"))
            fr = np.round(np.arange(0.05, 1.0001, 0.05), 2)
            steps = np.round(fr * r["steps"]).astype(np.int64)
            vals = _synthetic_loss(r["flops"], fr) * (1 + rng.normal(0, 0.001, len(fr)))
            batch = pa.table({"step": pa.array(steps, pa.int64()), "key": pa.array([key] * len(steps)),
                              "value": pa.array(vals, pa.float64())})
            replace_range(con, pk, batch, 0, None)
        hero = rungs.rung("hero")
        pk = upsert_run(con, RunInfo(source="wandb", entity="synthetic", project="synthetic",
                                     run_id="hero-synthetic-0001", name="synthetic hero"))
        fr = np.round(np.arange(0.05, hero_fraction + 1e-9, 0.05), 2)
        steps = np.round(fr * hero["steps"]).astype(np.int64)
        vals = _synthetic_loss(hero["flops"], fr) * (1 + hero_dev)
        batch = pa.table({"step": pa.array(steps, pa.int64()), "key": pa.array([key] * len(steps)),
                          "value": pa.array(vals, pa.float64())})
        replace_range(con, pk, batch, 0, None)


def test_online_band_recovers_law_and_scores_a_deviating_hero(store):
    from marinctl.analysis.scaling import ladder as lad
    _load_synthetic_ladder(store, hero_dev=0.03)
    with store.connect() as con:
        rs = lad.rung_series(con, "eval/paloma/macro_loss")
        assert [r["rung"] for r in rs] == ["rung1", "rung2", "rung3", "rung4"]
        final = lad.fit_power_law([r["compute"] for r in rs], [r["values"][-1] for r in rs], pin=1.6)
        assert final.A == pytest.approx(95.0, rel=0.1) and final.alpha == pytest.approx(0.094, rel=0.03)
        band = lad.predicted_band(con, "eval/paloma/macro_loss")
        assert band is not None and len(band["steps"]) == 20
        assert band["steps"][-1] == 390251
        assert np.all(band["lo"] <= band["mid"]) and np.all(band["mid"] <= band["hi"])
        truth = _synthetic_loss(2.7e24, np.asarray(band["steps"]) / 390251)
        assert np.allclose(band["mid"], truth, rtol=0.01)
        dev = lad.hero_deviation(con, "eval/paloma/macro_loss", band)
        assert dev["step"] == round(0.25 * 390251)
        assert dev["deviation"] == pytest.approx(0.03, abs=0.01)
        assert lad.predicted_band(con, "train/loss") is None


def test_cli_online_reports_rungs_and_deviation(cli, store, tmp_path):
    _load_synthetic_ladder(store, hero_dev=0.05)
    code, out, err = cli("--db", str(tmp_path / "test.duckdb"), "ladder", "--pin", "1.6", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "rungs" and len(doc["rungs"]) == 4
    assert doc["hero_deviation"]["deviation"] == pytest.approx(0.05, abs=0.01)
    code, out, err = cli("--db", str(tmp_path / "test.duckdb"), "ladder", "--pin", "1.6")
    said = f"{100 * doc['hero_deviation']['deviation']:+.2f}%"     # the deviation checked above, as people read it
    assert code == 0 and said in out, (said, out)
    code, out, err = cli("--db", str(tmp_path / "test.duckdb"), "ladder", "--metric", "no/such/metric")
    assert code == 2 and "no rung logged" in err
