"""`watch` on a reader machine of a team lake picks up what another machine's sync commits, live.

A `marinctl sync` process on "machine A" (its own home) writes a SYNTHETIC run served by the W&B
fake into the lake; `watch` on "machine B" (this process, not syncing: autosync off) shows it,
the run grows on the server, A syncs again, and B's screen shows the new last step without a key
pressed: it polls the lake's newest snapshot and re-reads when it moved.
"""

from __future__ import annotations

import pytest

from tests.blackbox import marinctl_run, sdk_env
from tests.fakes.growing import Feed, growing_run
from tests.fakes.wandb_server import WandbServer
from tests.lake import init_lake
from tests.watch_pilot import open_watch, run_test, wait_for_text

pytestmark = pytest.mark.asyncio


async def test_watch_on_a_reader_shows_steps_another_machine_commits(pg_cluster, tmp_path):
    from marinctl.store import lake_store

    url, data = pg_cluster.url(pg_cluster.new_database()), tmp_path / "shared"
    init_lake(url, data)
    run = growing_run("synthetic-alerts-lake-watch")
    with WandbServer([run], verbose=False) as server:
        feed = Feed(server, run)
        env = {**{k: v for k, v in sdk_env().items() if not k.startswith("MARINCTL_")},
               "MARINCTL_HOME": str(tmp_path / "a"), "MARINCTL_STORE": url, "MARINCTL_STORE_DATA": str(data),
               "WANDB_BASE_URL": server.url}

        def sync() -> None:
            done = marinctl_run(["sync", run.path], env=env, timeout=300)
            assert done.returncode == 0, done.stderr

        sync()
        app = open_watch(None, run.run_id, store=lake_store(url, str(data)), autosync=False)
        async with run_test(app) as pilot:
            await wait_for_text(pilot, f"▏step {feed.last_step}", timeout=60)
            step = feed.grow(25)
            sync()
            await wait_for_text(pilot, f"▏step {step}", timeout=60)
