"""Alerts in watch: watch follows, so each of its sync passes runs the alert pass.

`AlertPasses` binds the follow's alert adapter (sync/follow_alerts.py `FollowAlerts`, the one
`sync --follow` holds: the first pass is the baseline, one alert per run, cause and episode,
kept in the store, so a `sync --follow` beside watch never sends one twice) to the screen: new
alerts are posted back (`AlertsRaised`), a failed pass or delivery as a `FollowStatus` problem.
It runs in Live's threads (tui/live.py), never on the UI thread: after each W&B poll
(`after_sync`), and beside a local tail in a loop of its own (`tail`). `--notify` sinks get the
alerts from FollowAlerts' own delivery threads; with `--digest` its digest lines are posted back
(`DigestTold`) as they are sent.

`AlertToasts` says each new alert once on screen (UI thread): the ones this watch raised, and
those a `sync --follow` beside it stored for the run on screen (read with the view). Titles and
metric names are W&B's text: shown inert, never as markup.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from marinctl.analysis.alerts import priority
from marinctl.text import inert
from marinctl.tui import messages as msg

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from marinctl.analysis.alerts.rules import Rules
    from marinctl.store import Store
    from marinctl.sync.follow_alerts import FollowAlerts

TAIL_TICK_S = 0.2          # how often the local loop asks whether a pass is due
CLOSE_WAIT_S = 1.0         # on quit, the most a sink's current try is waited for
TOAST_S = 20.0             # an alert stays on screen this long


class AlertPasses:
    """FollowAlerts run after watch's sync passes, in the threads that ran them, said to `node`."""

    def __init__(self, node: DOMNode, store: Store, rules: Rules | None, sinks: Sequence = (),
                 digest_s: float | None = None) -> None:
        self._node, self._store, self._rules, self._sinks = node, store, rules, list(sinks)
        self._digest_s = digest_s
        self._alerts: FollowAlerts | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.closing: threading.Thread | None = None     # the delivery's close, started on quit

    def after_sync(self, uids: Iterable[str], *, detect: bool = False) -> None:
        """One alert pass over `uids` (and every run followed so far); the new alerts posted back."""
        alerts = self._follow()
        if alerts is not None:
            alerts.after_pass(uids, detect=detect)

    def tail(self, stop: threading.Event, polled: threading.Event, uids_at: Callable[[], list[str]]) -> Callable:
        """The local tail's side: returns its `on_update`; a thread runs the passes until `stop`.
        The first pass, once the tail has `polled` the files (caught up), is every followed run's
        baseline (`uids_at()`): what was logged before watch started raises nothing."""
        alerts = self._follow()

        def loop() -> None:
            while not stop.is_set() and not polled.wait(TAIL_TICK_S):
                pass
            if stop.is_set() or alerts is None:
                return
            alerts.changes.take(self._store)
            alerts.after_pass(uids_at(), detect=True)
            while not stop.wait(TAIL_TICK_S):
                alerts.local_pass()

        threading.Thread(target=loop, name="watch alerts", daemon=True).start()
        return alerts.changed if alerts is not None else (lambda results: None)

    def close(self) -> None:
        """Stop delivering, off the UI thread: each sink's current try ends, bounded (`closing` is
        that thread)."""
        with self._lock:
            self._closed, alerts = True, self._alerts
        if alerts is not None and alerts.delivery is not None:
            self.closing = threading.Thread(target=alerts.close, args=(CLOSE_WAIT_S,), name="watch alerts close")
            self.closing.start()

    def _follow(self) -> FollowAlerts | None:
        """The follow's FollowAlerts, made at its first pass (None once watch is closing)."""
        with self._lock:
            if self._closed:
                return None
            if self._alerts is None:
                from marinctl.sync.follow_alerts import FollowAlerts

                self._alerts = FollowAlerts(self._store, self._rules, self._sinks,
                                            said=lambda new: self._node.post_message(msg.AlertsRaised(new)),
                                            problem=lambda text: self._node.post_message(
                                                msg.FollowStatus(text, problem=True)),
                                            digest_s=self._digest_s,
                                            told=lambda lines: self._node.post_message(msg.DigestTold(lines)))
            return self._alerts


class AlertToasts:
    """Each alert fired since watch started, said once as a notification; the digests as they go."""

    def __init__(self, notify: Callable[..., Any]) -> None:
        self._notify = notify
        self._since = datetime.now(timezone.utc)
        self._said: set[int] = set()

    def show(self, alerts: Iterable[dict[str, Any]]) -> int:
        """Toast the alerts not said yet (fired after watch started), oldest first; how many."""
        fresh = [a for a in alerts if a["alert_id"] not in self._said and _after(a.get("fired_at"), self._since)]
        for a in sorted(fresh, key=lambda a: a["alert_id"]):
            self._said.add(a["alert_id"])
            self._notify(toast_text(a), title=inert(a.get("title"), single_line=True)[:200] or "alert",
                         severity="error" if priority.of(a) in ("high", "emergency") else "warning", timeout=TOAST_S,
                         markup=False)
        return len(fresh)

    def digest(self, lines: Sequence[str]) -> None:
        """`--digest`'s lines as one quiet notification (W&B's run names inert)."""
        if lines:
            self._notify("\n".join(inert(line, single_line=True)[:300] for line in lines), title="digest",
                         severity="information", timeout=TOAST_S, markup=False)


def toast_text(alert: dict[str, Any]) -> str:
    """Priority, cause class, severity and where, then the command that explains it (untrusted names inert)."""
    where = f" · {inert(alert['metric'], single_line=True)[:80]}" if alert.get("metric") else ""
    run = inert(alert.get("run_id") or alert.get("run_uid") or "", single_line=True)[:80]
    return (f"{priority.of(alert)} · {alert.get('cause_class')} · {alert.get('severity')}{where} · {run}\n"
            f"{inert(alert.get('command'), single_line=True)}")


def _after(fired: Any, since: datetime) -> bool:
    if not isinstance(fired, datetime):
        return True     # this watch's own pass raised it
    return (fired if fired.tzinfo else fired.replace(tzinfo=timezone.utc)) >= since
