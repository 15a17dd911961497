"""Forks: every row every run of a fork chain logged is stored, and the stitched view
takes a child's own rows from its first logged step on and its parent's rows only before it.

Three shapes, remote (the loopback W&B fake serving W&B's fork semantics: a child that logs the
fork step itself replaces its parent's row there) and local (`.wandb` files written by the real
SDK with `fork_from`): a child that logs the fork step itself, a child that starts a few steps
after it, and a chain of three. Read back only through `sync`, `export [--stitched]`,
`show --json` (lineage) and `runs --json`. All runs are SYNTHETIC.

Note (measured with wandb 0.31 offline): the SDK starts a forked run at `fork_step + 1` and drops
a `log(step=fork_step)`, so a local child cannot log the fork step itself; that shape is remote only.
"""

from __future__ import annotations

import pytest

from repro.wandb_log import teardown as teardown_wandb  # wandb.teardown() that cannot wait for ever
from tests.blackbox import cli_json, export_rows, marinctl_run, sdk_env, sdk_write, sync_served

E, P = "synthetic-lab", "forks-synthetic"


def _run(run_id, steps, start=0, parent=None, fork=None, seed=0):
    from tests.fakes.synth import marin_run

    return marin_run(run_id, steps=steps, start_step=start, fork_parent=parent, fork_step=fork, seed=seed,
                     entity=E, project=P, group="forks-synthetic", layers=1, experts=2, norm_every=50,
                     eval_every=100, num_train_steps=400)


def remote_runs():
    """(name of scenario) -> runs root first. Parents log past the fork point (ignored when stitched)."""
    return {
        # the child logs the fork step 120 itself, as in W&B's forking guide
        "fork-step": [_run("fs-parent-synthetic", 200), _run("fs-child-synthetic", 130, 120, "fs-parent-synthetic", 120, 1)],
        # the child's first row is 5 steps after the fork step
        "after": [_run("af-parent-synthetic", 200), _run("af-child-synthetic", 125, 125, "af-parent-synthetic", 120, 2)],
        # root -> a (logs its fork step 100) -> b (forked from a at 160, first row 163)
        "chain": [_run("ch-root-synthetic", 150), _run("ch-a-synthetic", 100, 100, "ch-root-synthetic", 100, 3),
                  _run("ch-b-synthetic", 97, 163, "ch-a-synthetic", 160, 4)],
    }


def expected_stitched(chain) -> list[tuple[int, str, float]]:
    """Each run's own rows from its first logged step up to (excluding) its child's first row,
    and never past the fork step its child branched at."""
    out = []
    for i, run in enumerate(chain):
        lo = int(run.steps()[0])
        hi = None
        if i + 1 < len(chain):
            child = chain[i + 1]
            hi = min(int(child.steps()[0]), child.fork_step + 1)
        out += [r for r in run.long_rows() if r[0] >= lo and (hi is None or r[0] < hi)]
    return sorted(out)


def expected_lineage(chain) -> list[dict]:
    out = []
    for i, run in enumerate(chain):
        lo = int(run.steps()[0])
        if i + 1 < len(chain):
            child = chain[i + 1]
            to = min(int(child.steps()[0]) - 1, child.fork_step)
        else:
            to = int(run.steps()[-1])
        out.append({"run": run.run_id, "from_step": lo, "to_step": to})
    return out


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    scenarios = remote_runs()
    home = tmp_path_factory.mktemp("forks-home")
    done = sync_served([r for chain in scenarios.values() for r in chain], f"{E}/{P}", "--json",   # W&B's fork serving
                       env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return {"scenarios": scenarios, "home": home, "report": done.stdout}


def _rows(cli, home, run, *extra):
    return sorted((s, k, float(v)) for s, k, v in export_rows(lambda *a: cli("--home", str(home), *a), run, *extra))


@pytest.mark.parametrize("scenario", ["fork-step", "after", "chain"])
def test_every_row_every_run_logged_is_stored(cli, remote, scenario):
    for run in remote["scenarios"][scenario]:
        assert _rows(cli, remote["home"], run.run_id) == sorted(run.long_rows()), run.run_id


@pytest.mark.parametrize("scenario", ["fork-step", "after", "chain"])
def test_stitched_view_takes_the_child_from_its_first_row(cli, remote, scenario):
    chain = remote["scenarios"][scenario]
    assert _rows(cli, remote["home"], chain[-1].run_id, "--stitched") == expected_stitched(chain)


@pytest.mark.parametrize("scenario", ["fork-step", "after", "chain"])
def test_lineage_reports_the_ranges_used(cli, remote, scenario):
    chain = remote["scenarios"][scenario]
    doc = cli_json(lambda *a: cli("--home", str(remote["home"]), *a), "show", chain[-1].run_id, "--json")
    assert doc["lineage"] == expected_lineage(chain)


def test_runs_list_the_fork_points(cli, remote):
    runs = {r["run"]: r for r in cli_json(lambda *a: cli("--home", str(remote["home"]), *a), "runs", "--json")}
    for chain in remote["scenarios"].values():
        for run in chain:
            assert (runs[run.run_id]["fork_parent"], runs[run.run_id]["fork_step"]) == (run.fork_parent, run.fork_step)


def test_sync_report_names_the_childs_first_step(remote):
    import json

    report = {r["run"]: r for r in json.loads(remote["report"])["runs"]}
    for chain in remote["scenarios"].values():
        for run in chain:
            assert report[run.run_id]["first_step"] == int(run.steps()[0]), run.run_id


def test_default_fake_serves_forks_as_wandb_does(wandb_server):
    """The fake serves a child that logged its fork step its own row there by default (W&B's
    semantics, `fork_from_first_logged`); turned off, the parent's row (the old assumption)."""
    parent, child = remote_runs()["fork-step"]
    at_fork = {}
    for flag in (None, False, True):
        server = wandb_server([parent, child], **({} if flag is None else {"fork_from_first_logged": flag}))
        at_fork[flag] = server.history.rows(child, 120, 121)[0]["train/loss"]
    loss = lambda run: dict(zip(*[a.tolist() for a in run.series["train/loss"]]))[120]  # noqa: E731
    assert at_fork == {None: loss(child), False: loss(parent), True: loss(child)} and loss(parent) != loss(child)


# --- local forks through the SDK's fork_from -------------------------------------------------------------

LOCAL = '''
def init(run_id, **kw):
    return wandb.init(mode="offline", dir=out, project="forks-synthetic", id=run_id, name=run_id, settings=S(), **kw)
rows = {}
def log(run, step):
    v = {"loss": 10.0 - step * 0.01 + len(run.id), "seen": float(step)}
    run.log(v, step=step)
    rows.setdefault(run.id, []).append({"_step": step, **v})
r = init("lf-root-synthetic")
for s in range(30):            # logs past the fork point 10
    log(r, s)
r.finish()
a = init("lf-a-synthetic", fork_from="lf-root-synthetic?_step=10")
for s in range(13, 25):        # starts three steps after its fork point
    log(a, s)
a.finish()
b = init("lf-b-synthetic", fork_from="lf-a-synthetic?_step=20")
for s in range(21, 36):        # starts right after its fork point (the SDK's own first step)
    log(b, s)
b.finish()
logged.update(rows)
'''


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local-forks")
    logged = sdk_write(out, LOCAL)
    home = tmp_path_factory.mktemp("local-forks-home")
    done = marinctl_run(["sync", str(out / "wandb")], env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return {"logged": logged, "home": home}


def _user_rows(cli, home, run, *extra):
    return sorted((s, k, float(v)) for s, k, v in export_rows(lambda *a: cli("--home", str(home), *a), run, *extra)
                  if not k.startswith("_"))


def _truth(rows):
    return sorted((r["_step"], k, float(v)) for r in rows for k, v in r.items() if k != "_step")


def test_local_chain_every_row_is_stored(cli, local):
    for run_id, rows in local["logged"].items():
        assert _user_rows(cli, local["home"], run_id) == _truth(rows), run_id


def test_local_chain_stitched_view(cli, local):
    lg = local["logged"]
    want = sorted([r for r in _truth(lg["lf-root-synthetic"]) if r[0] <= 10]
                  + [r for r in _truth(lg["lf-a-synthetic"]) if r[0] <= 20]
                  + _truth(lg["lf-b-synthetic"]))
    assert _user_rows(cli, local["home"], "lf-b-synthetic", "--stitched") == want


def test_local_chain_lineage_reports_the_ranges_used(cli, local):
    doc = cli_json(lambda *a: cli("--home", str(local["home"]), *a), "show", "lf-b-synthetic", "--json")
    assert doc["lineage"] == [{"run": "lf-root-synthetic", "from_step": 0, "to_step": 10},
                              {"run": "lf-a-synthetic", "from_step": 13, "to_step": 20},
                              {"run": "lf-b-synthetic", "from_step": 21, "to_step": 35}]


def test_fake_fork_semantics_read_the_same_through_the_real_sdk(wandb_server):
    """The fake's `fork_from_first_logged` serving, read by wandb.Api().scan_history(): the parent's
    rows below the child's first logged step, then the child's own rows (the SDK contract holds)."""
    wandb = pytest.importorskip("wandb")
    parent, child = remote_runs()["fork-step"]
    server = wandb_server([parent, child], fork_from_first_logged=True, exported_until={child.run_id: 0})
    try:
        api = wandb.Api(api_key="x" * 40, overrides={"base_url": server.url})
        rows = list(api.run(f"{E}/{P}/{child.run_id}").scan_history(keys=["train/loss"]))
    finally:
        teardown_wandb()
    got = {int(r["_step"]): r["train/loss"] for r in rows}
    loss = lambda run: dict(zip(*[a.tolist() for a in run.series["train/loss"]]))  # noqa: E731
    want = {s: v for s, v in loss(parent).items() if s < 120} | loss(child)
    assert got == want
