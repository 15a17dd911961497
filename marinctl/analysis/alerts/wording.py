"""What an alert says: a title, explain's first paragraph, and the command to look closer.

The words are explain's (analysis/explain/): the summary line `marinctl explain step N`
prints first ("What stands out near step N: …", or "Two things happened at step S: …"), and
the headline of the finding the alert is about. They are worked out once, when the alert
fires, and stored with it: a retry or a later follower sends what the first one would have.
The text keeps W&B's raw names; every sink makes it inert in its own format (sync/sinks.py).
"""

from __future__ import annotations

import shlex
from typing import Any

from marinctl import numbers as N
from marinctl.analysis.alerts.raised import Candidate
from marinctl.store import Connection
from marinctl.store import alerts as alerts_store
from marinctl.store.lineage import single

_KIND_WORDS = {"threshold": "threshold", "change": "change", "zscore": "z-score"}


def run_ref(con: Connection, run: dict[str, Any]) -> str:
    """How a command names the run: its id when that is unambiguous in the store, else its uid."""
    return run["run_id"] if alerts_store.run_ref_is_unique(con, run["run_id"]) else run["uid"]


def command(con: Connection, run: dict[str, Any], step: int) -> str:
    """`marinctl explain step N --run RUN`, quoted for a shell (a run id is untrusted text)."""
    return f"marinctl explain step {max(int(step), 0)} --run {shlex.quote(run_ref(con, run))}"


def words(con: Connection, run: dict[str, Any], c: Candidate) -> tuple[str, str | None]:
    """(title, summary) of an alert about to fire; a rule's alert with no cause of its own takes
    explain's cause at its step (`c.cause_class` is set)."""
    if c.kind == "hero_band":   # its figures say it all; explain's words are about what a run did
        from marinctl.analysis.scaling.hero_band import words as band_words

        return band_words(c.details, run["run_id"])
    doc = _explained(con, run, c.step) if c.kind not in ("stale", "crashed", "silent", "stalled") else None
    summary = doc.get("summary") if doc else None
    label = run["run_id"]
    if c.kind in ("stale", "crashed"):
        return _liveness_words(run, c)
    if c.kind in ("silent", "stalled"):
        return _quiet_words(run, c)
    if c.cause_class == "none" and doc and doc.get("findings"):
        c.cause_class = doc["findings"][0]["cause_class"]
    if c.cause.startswith("rule:"):
        title = f"{c.details['rule']}: {_rule_figure(c)} at step {N.count(c.step)} on {label}"
        return title, summary or _rule_sentence(c)
    if c.kind == "nonfinite":
        title = f"{c.metric} became {c.details.get('value')} at step {N.count(c.step)} on {label}"
        if c.details.get("rule"):
            title = f"{c.details['rule']}: {title}"
        return title, summary or f"{c.metric} logged {c.details.get('value')} at step {N.count(c.step)}."
    finding = _finding(doc, c) if doc else None
    what = finding_headline(finding) if finding else f"{c.kind.replace('_', ' ')} in {c.metric}"
    return f"{what[:1].upper()}{what[1:]} on {label}", summary


def finding_headline(f: dict[str, Any]) -> str:
    from marinctl.analysis.explain.explanations import headline

    text = headline(f)
    return text.rsplit(" [", 1)[0] if text.endswith("]") else text


def _explained(con: Connection, run: dict[str, Any], step: int) -> dict[str, Any] | None:
    from marinctl.analysis.explain.explain import explain

    try:
        return explain(con, single(run), step)
    except Exception:  # noqa: BLE001 — an alert without explain's words still fires
        return None


def _finding(doc: dict[str, Any], c: Candidate) -> dict[str, Any] | None:
    found = doc.get("findings") or []
    for test in (lambda f: f["kind"] == c.kind and f["cause_class"] == c.cause_class,
                 lambda f: f["cause_class"] == c.cause_class):
        hit = [f for f in found if test(f)]
        if hit:
            return hit[0]
    return None


def _rule_figure(c: Candidate) -> str:
    d = c.details
    fig = d.get("figure")
    fig_s = N.measured(fig) if isinstance(fig, float) else str(fig)
    if d["rule_kind"] == "zscore" and d.get("recent", 1) > 1:
        return (f"{d['stat']} of {c.metric} over {d['recent']} rows at z = "
                f"{N.fixed(fig, 1) if isinstance(fig, float) else fig_s} against the {d['window']} rows before")
    if d["rule_kind"] == "threshold":
        bound = f"above {N.measured(d['above'])}" if "above" in d and isinstance(fig, float) and fig > d["above"] \
            else f"below {N.measured(d.get('below'))}"
        return f"{d['stat']} of {c.metric} over {d['window']} rows is {fig_s} ({bound})"
    if d["rule_kind"] == "change":
        amount = N.percent(fig, 1, signed=True) if "relative" in d and isinstance(fig, float) else fig_s
        return f"{d['stat']} of {c.metric} changed {amount} against the {d.get('baseline') or d['window']} rows before"
    return f"{c.metric} at z = {N.fixed(fig, 1) if isinstance(fig, float) else fig_s} against its last {d['window']} rows"


def _rule_sentence(c: Candidate) -> str:
    return f"Rule {c.details['rule']!r} ({_KIND_WORDS[c.details['rule_kind']]}): {_rule_figure(c)} from step {N.count(c.step)}."


def _quiet_words(run: dict[str, Any], c: Candidate) -> tuple[str, str]:
    label, d = run["run_id"], c.details
    quiet = N.duration(d["quiet_s"])
    what = "no heartbeat" if c.kind == "silent" else "no new step"
    return (f"{d['rule']}: {what} for {quiet} at step {N.count(c.step)} on {label}",
            f"{label} says {d.get('state') or 'running'}, and has sent {what} for {quiet} (the rule's bar: "
            f"{N.duration(d['after_s'])}); its last logged step is {N.count(c.step)}.")


def _liveness_words(run: dict[str, Any], c: Candidate) -> tuple[str, str]:
    label, d = run["run_id"], c.details
    last = f"step {N.count(c.step)}" if c.start >= 0 else "no step logged"
    if c.kind == "crashed":
        return (f"{label} {d.get('state') or 'crashed'} at {last}",
                f"The run is {d.get('state') or 'crashed'}; its last logged step is {N.count(c.step)}.")
    silent = N.duration(d.get("silent_s")) if d.get("silent_s") is not None else "a while"
    return (f"{label} is stale: no heartbeat for {silent} (last at {last})",
            f"Nothing new from the run for {silent}; its last logged step is {N.count(c.step)}."
            + (f" Stale after {N.duration(d['stale_after_s'])}." if d.get("stale_after_s") else ""))
