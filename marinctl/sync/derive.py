"""What the pipeline derives once new data has landed: events on the step axis, anomalies.

Analysis computes (analysis/events/align.py, analysis/detect/detection.py) and returns plain values;
this module writes them through the store, each pass in one transaction with its position.
"""

from __future__ import annotations

from typing import Iterable

from marinctl.store import Connection, Store, anomalies, events, runs, state


def after_sync(store: Store, uids: Iterable[str], *, realign: bool) -> None:
    """The pipeline's last step, in one transaction: detection on the runs just synced, then
    (when anything landed) every event aligned again. Detection and the aligner load only when
    there is something for them (a project sync that leaves detection for later skips both)."""
    uids = list(uids)
    if not uids and not realign:
        return
    with store.transaction() as con:
        for uid in uids:
            run_pk = runs.pk_of(con, uid)
            if run_pk is not None:
                detect(con, run_pk)
        if realign and events.any_to_align(con):
            from marinctl.analysis.events import align

            events.set_alignment(con, align.realign(con))


def realign_events(store: Store) -> int:
    """(Re)align every GitHub/logbook event to a run and step; returns rows changed.

    Runs after each GitHub sync and after W&B history lands, so events synced before
    their run's history arrived get their steps once it has.
    """
    from marinctl.analysis.events import align

    with store.transaction() as con:
        return events.set_alignment(con, align.realign(con))


def detect(con: Connection, run_pk: int, *, full: bool = False) -> int:
    """One detection pass over a run (incremental, or `full`), stored; returns anomalies new to the store.

    Call inside a transaction: the anomalies and the new detection position land together,
    so an interrupted pass is simply redone. Idempotent: rerunning finds nothing new.
    """
    from marinctl.analysis.detect import detection

    found = detection.full(con, run_pk) if full else detection.incremental(con, run_pk)
    new = 0
    if found.full:
        anomalies.clear(con, run_pk, None, keep_kinds=("rewind",))
        state.forget_detection(con, found.uid)
    if found.rewound_at is not None:
        anomalies.clear(con, run_pk, found.rewound_at)
        anomalies.insert(con, [found.rewind])
        new += 1
    if found.replace_from is not None:
        new += anomalies.replace_from(con, run_pk, found.replace_from, found.found)
    anomalies.remove(con, found.superseded)
    anomalies.restore(con, found.updated)
    if found.position is not None:
        state.save_detection(con, found.uid, found.position, found.memory)
    return new
