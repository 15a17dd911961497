"""Delivery per sink, through the real CLI: `marinctl sync TARGET --follow --notify SINK…`.

A sink that failed is tried again alone — by the same follower, and after a restart by the next
one — and a sink that accepted an alert is never sent it again. A sink that hangs holds up no
sync pass; a follower killed while a sink's POST is in flight leaves that sink owed, and the next
follower sends it again with the same idempotency key (body and header), so the receiver can
tell. One layer down: the retry schedule past its first step, each wait at least its backoff.

Loopback fakes only (the W&B GraphQL fake serving a SYNTHETIC growing run, a webhook receiver);
every wait is on an event (a line the follower prints, a request a fake answered).
"""

from __future__ import annotations

import os

import pytest

from tests.fakes.growing import Feed, growing_run
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.follower import WAIT_S, follow, listed


@pytest.fixture
def env(_isolated_home):
    return {**os.environ, "MARINCTL_HOME": str(_isolated_home)}


def _at(posts: list, prefix: str, *, ok: bool | None = None) -> list:
    """The POSTs under `prefix` (answered 2xx: ok=True; refused: ok=False)."""
    return [p for p in posts if p.path.startswith(prefix) and (ok is None or (p.status < 300) == ok)]


def test_a_failed_sink_is_retried_alone_and_a_sink_that_took_it_never_gets_it_again(env):
    run = growing_run("synthetic-alerts-per-sink", seed=11)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        sinks = (f"webhook={hook.url}/good", f"webhook={hook.url}/down/synthetic-secret-path")
        hook.failing.add("/down")
        with follow(run.path, env, *sinks) as one:
            one.synced(feed.last_step)
            feed.grow(10, co_spike=True)
            one.synced(feed.last_step)
            # /good took it; /down refused its first try and its first retry
            took = lambda posts: len(_at(posts, "/good")) == 1 and len(_at(posts, "/down")) >= 2  # noqa: E731
            assert hook.wait_for(took, WAIT_S), one.err[-2000:]
            one.passes(server)
            assert one.stop() in (0, 130), one.err[-2000:]
        assert len(_at(hook.posts, "/good")) == 1, "the sink that took it was sent it again while another retried"
        (row,) = listed(env)
        assert row["delivered"] is True and row["delivered_to"] == ["webhook"], row
        by_ok = sorted(row["deliveries"], key=lambda d: d["delivered"])
        assert [d["delivered"] for d in by_ok] == [False, True] and by_ok[0]["tries"] >= 2, row
        assert "answered HTTP 500" in by_ok[0]["last_error"] and "synthetic-secret-path" not in by_ok[0]["last_error"]

        hook.failing.clear()                                   # /down is back; a new follower of the run
        with follow(run.path, env, *sinks) as two:
            assert hook.wait_for(lambda posts: len(_at(posts, "/down", ok=True)) == 1, WAIT_S), two.err[-2000:]
            two.passes(server, 2)                              # more passes: neither sink hears of it again
            assert two.stop() in (0, 130), two.err[-2000:]
    good, down = _at(hook.posts, "/good"), _at(hook.posts, "/down")
    assert len(good) == 1 and len(_at(down, "/down", ok=True)) == 1, [(p.path, p.status) for p in hook.posts]
    keys = {p.headers.get("Idempotency-Key") for p in good + down} | {p.body["idempotency_key"] for p in good + down}
    assert len(keys) == 1 and keys.pop().startswith("marinctl-"), keys     # one key, in every body and header
    assert len({p.raw for p in good + down}) == 1                          # every try the same bytes
    (row,) = listed(env)
    assert all(d["delivered"] for d in row["deliveries"]) and row["idempotency_key"] == good[0].body["idempotency_key"]


def test_a_hung_sink_holds_up_no_pass_and_a_post_cut_by_a_kill_is_resent_with_its_key(env):
    run = growing_run("synthetic-alerts-hung-sink", seed=12)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        sink = f"webhook={hook.url}/hook"
        with follow(run.path, env, sink) as one:
            one.synced(feed.last_step)
            hook.hold.clear()                                  # from now on the receiver answers nothing
            feed.grow(10, co_spike=True)
            one.synced(feed.last_step)
            assert hook.wait_for(lambda posts: len(posts) >= 1, WAIT_S), one.err[-2000:]
            for _ in range(3):                                 # the sink hangs; the follow goes on syncing
                one.synced(feed.grow(4))
            assert not hook.hold.is_set() and hook.held >= 1   # …while the POST was still unanswered
            one.kill()                                         # killed with the POST in flight
        hook.hold.set()
        (row,) = listed(env)
        assert row["delivered"] is False, row                  # the try cut short was never recorded
        before = len(hook.posts)
        with follow(run.path, env, sink) as two:               # the next follower: the killed one's claim is void
            assert hook.wait_for(lambda posts: any(p.status < 300 for p in posts[before:]), WAIT_S), two.err[-2000:]
            two.passes(server)
            assert two.stop() in (0, 130), two.err[-2000:]
    posts = _at(hook.posts, "/hook")
    assert len(posts) >= 2 and len({p.raw for p in posts}) == 1, [(p.at, p.status) for p in posts]
    assert len({p.headers["Idempotency-Key"] for p in posts}) == 1          # the receiver can drop the resend
    (row,) = listed(env)
    assert row["delivered"] is True and row["deliveries"][0]["delivered"], row


def test_the_retry_schedule_waits_at_least_each_backoff_past_the_first_retry(tmp_path):
    """One layer down: a sink that refuses four tries and accepts the fifth is tried with waits of
    at least 0.2, 0.4, 0.8 and 1.6 s (a retry never comes early; lateness is the machine's load)."""
    from marinctl.store import Store
    from marinctl.store import alerts as alerts_store
    from marinctl.sync.delivery import Delivery
    from marinctl.sync.sinks import parse

    store = Store(tmp_path / "synthetic.duckdb")
    with WebhookReceiver(fail_first=4) as hook:
        sink = parse(f"webhook={hook.url}/retry")
        with store.transaction() as con:
            aid = alerts_store.insert(con, {"run_uid": "synthetic-lab/p/synthetic-retry", "cause": "optimizer",
                                            "episode_start": 5, "episode_end": 7, "step": 6, "metric": "train/loss",
                                            "kind": "co_spike", "cause_class": "optimizer", "severity": "high",
                                            "title": "SYNTHETIC", "summary": None, "command": "marinctl explain step 6",
                                            "details": {}})
            (alert,) = alerts_store.get(con, [aid])
        backoff = (0.2, 0.4, 0.8, 1.6)
        delivery = Delivery(store, [sink], me="synthetic:1", backoff=backoff).start()
        try:
            delivery.submit([(alert, None)])
            assert hook.wait_for(lambda posts: len(posts) >= 5, WAIT_S)
        finally:
            delivery.close()
    at = [p.at for p in hook.posts]
    assert [p.status for p in hook.posts] == [500, 500, 500, 500, 200]
    waits = [b - a for a, b in zip(at, at[1:])]
    assert all(w >= b - 0.01 for w, b in zip(waits, backoff)), waits
    with store.connect() as con:
        (got,) = alerts_store.deliveries(con, [aid])[aid]
    assert got["tries"] == 5 and got["delivered_at"] is not None
