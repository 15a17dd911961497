"""Every view describes a run with the run's own schedule.

On a synced ladder rung, a local `.wandb` run and a repro-shaped run (tests/run_kinds.py), the
facts a person reads — total steps, warm-up end, data phase, tokens — must come from the run
itself (its config and its logged keys), not from the published rung it reproduces; the
published rung is an overlay. Checked through `show`, `explain --json`, `mix --json`,
`anomalies --json`, `plot --x tokens|fraction` and the `watch` header. `ladder --pin 1.6`
still fits the logged rungs with a repro run present, and `rung1` names the logged rung.
All runs are SYNTHETIC.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.blackbox import cli_json, parse_number, run_cli
from tests.run_kinds import KINDS, REPRO_ID, RUNG_ID, SCHEDULES, kinds_home, local_wandb_dir
from tests.watch_pilot import header, open_watch, run_test, settle


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return kinds_home(tmp_path_factory)


@pytest.fixture
def mc(cli, home):
    return lambda *args: cli("--home", str(home), *args)


def kinds(*xfail_for: str, reason: str = ""):
    """Parametrize over the three kinds; the named ones xfail (strict) with `reason`."""
    mark = pytest.mark.xfail(strict=True, reason=reason) if xfail_for else None
    return pytest.mark.parametrize("kind", [pytest.param(k, marks=[mark] if k in xfail_for else [])
                                            for k in KINDS])


def phase_at(sched, step):
    return max(i for i, s in enumerate(sched["phases"]) if step >= s)


def probe_step(sched) -> int:
    return sched["probe"]


@kinds()
def test_show_names_the_run_and_its_config(mc, kind):
    run = KINDS[kind]
    doc = cli_json(mc, "show", run, "--json")
    assert doc["run"] == run and doc["last_step"] == SCHEDULES[run]["last"]
    assert doc["config"], "config lost"


@kinds()
def test_explain_context_uses_the_runs_own_schedule(mc, kind):
    run = KINDS[kind]
    sched = SCHEDULES[run]
    step = probe_step(sched)
    doc = cli_json(mc, "explain", "step", str(step), "--run", run, "--json")
    lr, data = doc["context"]["lr"], doc["context"]["data"]
    assert (lr["total_steps"], lr["warmup_end_step"]) == (sched["total"], sched["warmup_end"])
    k = phase_at(sched, step)
    assert (data["number"], data["start_step"]) == (k + 1, sched["phases"][k])
    nxt = sched["phases"][k + 1] if k + 1 < len(sched["phases"]) else None
    assert data.get("next_switch") == nxt


@kinds()
def test_mix_phases_are_the_runs_own(mc, kind):
    run = KINDS[kind]
    sched = SCHEDULES[run]
    last = sched["last"]
    doc = cli_json(mc, "mix", "--run", run, "--at", str(last), "--json")
    starts = [p["start_step"] for p in doc["phases"]]
    assert len(starts) == len(sched["phases"]) and all(abs(a - b) <= 1 for a, b in zip(starts, sched["phases"])), starts
    assert doc["active_number"] == phase_at(sched, last) + 1, doc


@pytest.fixture(scope="module")
def with_a_nan_run(tmp_path_factory):
    """A copy of the home plus one more SYNTHETIC run with a NaN loss at step 150 (the kinds have no
    anomaly of their own): anomalies that `--run` must keep out, and ones it must list."""
    from tests.blackbox import sdk_env, sync_served
    from tests.fakes.synth import marin_run
    from tests.run_kinds import copy_home

    home = copy_home(tmp_path_factory, tmp_path_factory.mktemp("kinds-nan") / "home")
    run = marin_run("nan-synthetic", steps=300, layers=1, experts=2, norm_every=50)
    run.set_values("train/loss", [150], [float("nan")])
    done = sync_served([run], f"{run.entity}/{run.project}/{run.run_id}", env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return home, run.run_id


@kinds()
def test_anomalies_are_about_the_run(cli, with_a_nan_run, kind):
    home, other = with_a_nan_run
    mc = lambda *args: cli("--home", str(home), *args)  # noqa: E731
    everything = cli_json(mc, "anomalies", "--json")
    assert (other, 150) in {(a["run"], a["step"]) for a in everything}, everything[:5]   # the filter has work to do
    run = KINDS[kind]
    assert [a for a in cli_json(mc, "anomalies", "--run", run, "--json") if a["run"] != run] == []
    theirs = cli_json(mc, "anomalies", "--run", other, "--json")
    assert theirs and {a["run"] for a in theirs} == {other}


def _ticks(chart: str) -> tuple[list[float], str]:
    """The x tick values of a plotext chart on stdout, and the axis label under them."""
    lines = chart.rstrip("\n").splitlines()
    i = max(j for j, line in enumerate(lines) if line.lstrip().startswith("└"))
    ticks = [parse_number(t) for t in lines[i + 1].split()]
    label = lines[i + 2].strip() if i + 2 < len(lines) else ""
    return ticks, label


@kinds()
def test_plot_tokens_axis_uses_the_runs_own_tokens(mc, kind):
    run = KINDS[kind]
    sched = SCHEDULES[run]
    _, out, _ = run_cli(mc, "plot", "train/loss", "--run", run, "--x", "tokens", "--width", "100", "--height", "16")
    ticks, label = _ticks(out)
    assert "unavailable" not in label, label
    end = sched["last"] * sched["tokens_per_step"]
    spacing = ticks[-1] - ticks[-2]
    assert ticks[-1] <= end * 1.001 and end <= ticks[-1] + 2 * spacing, (ticks, end)


@kinds()
def test_plot_fraction_axis_uses_the_runs_own_length(mc, kind):
    run = KINDS[kind]
    sched = SCHEDULES[run]
    _, out, _ = run_cli(mc, "plot", "train/loss", "--run", run, "--x", "fraction", "--width", "100", "--height", "16")
    ticks, label = _ticks(out)
    assert "unavailable" not in label, label
    end = sched["last"] / sched["total"]
    spacing = ticks[-1] - ticks[-2]
    assert ticks[-1] <= end + 1e-9 and end <= ticks[-1] + 2 * spacing, (ticks, end)


@pytest.mark.asyncio
@kinds()
async def test_watch_header_uses_the_runs_own_schedule(home, kind):
    run = KINDS[kind]
    sched = SCHEDULES[run]
    app = open_watch(home / "marinctl.duckdb", run)
    async with run_test(app) as pilot:
        text = header(await settle(pilot))
    assert f"{sched['last']:,} / {sched['total']:,}" in text, text
    assert "11,420" not in text
    k = phase_at(sched, sched["last"])
    assert re.search(rf"data (phase )?{k + 1}\b", text), text
    tokens = parse_number(re.search(r"tokens\s+(\S+)", text).group(1))
    assert tokens == pytest.approx((sched["last"] + 1) * sched["tokens_per_step"], rel=0.01), text


def test_ladder_with_a_repro_run_present_fits_the_logged_rungs(mc):
    doc = cli_json(mc, "ladder", "--pin", "1.6", "--json")
    names = " ".join(r["name"] for r in doc["rungs"])
    assert doc["source"] == "rungs" and len(doc["rungs"]) == 4, doc["rungs"]
    assert "repro" not in names and REPRO_ID not in names


def test_ladder_pin_for_people_fits_the_logged_rungs_with_a_repro_run_present(mc):
    _, out, _ = run_cli(mc, "ladder", "--pin", "1.6")
    assert "source: rungs" in out and "L_inf = 1.6000 (pinned)" in out, out[:600]
    rows = re.findall(r"^(rung\d) d\d+ ", out, re.M)
    assert rows == ["rung1", "rung2", "rung3", "rung4"] and REPRO_ID not in out, out[:600]


def test_ladder_pin_works_when_the_only_run_is_a_repro_run(cli, tmp_path_factory, tmp_path):
    folder = next(d for d in local_wandb_dir(tmp_path_factory).iterdir() if d.name.endswith(REPRO_ID))
    home = tmp_path / "demo-home"
    run_cli(cli, "--home", str(home), "sync", str(folder))
    code, out, err = cli("--home", str(home), "ladder", "--pin", "1.6", "--json")
    assert code == 0, err
    doc = json.loads(out)     # no logged rung: the published v16 isoFLOP points, never the repro run
    assert doc["source"] == "published-v16-isoflop" and len(doc["rungs"]) == 6, doc["source"]
    assert REPRO_ID not in " ".join(r["name"] for r in doc["rungs"])


@pytest.mark.parametrize("command", [("show", "rung1", "--json"), ("explain", "step", "10", "--run", "rung1", "--json"),
                                     ("mix", "--run", "rung1", "--json")])
def test_rung1_means_the_logged_rung(mc, command):
    """`run` is the logged rung's id: the alias, echoed back, would name nothing other commands take."""
    assert cli_json(mc, *command)["run"] == RUNG_ID
