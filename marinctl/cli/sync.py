"""`marinctl sync`: mirror W&B runs, local .wandb runs and GitHub history into the store."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Optional

import typer

from marinctl.cli import output
from marinctl.cli.notify import Digest, Preset


def register(app: typer.Typer) -> None:
    app.command(
        "sync",
        help=(
            "Mirror runs into the local DuckDB store. TARGET: `marin` (default: hero lineage, ladder runs, "
            "hero GitHub issues, logbook, mixture), a W&B URL (wandb.ai or forge form), ENTITY/PROJECT[/RUN_ID], "
            "a wandb/ dir, run dir or .wandb file, github:OWNER/REPO#N, github:OWNER/REPO/path. "
            "Safe to interrupt: the next sync resumes without duplicates."
        ),
    )(sync)


def sync(
    targets: Annotated[Optional[list[str]], typer.Argument(metavar="TARGET", help="What to mirror (default: marin); several may be given.")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep syncing every --interval seconds until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between syncs with --follow.")] = 30.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the contract's JSON summary.")] = False,
    notify: Annotated[Optional[list[str]], typer.Option(
        "--notify", metavar="SINK", help="With --follow: send each new alert to SINK — desktop, webhook=URL, slack=URL, "
        "discord=URL, exec=COMMAND (JSON on stdin), pushover=USER_KEY or ntfy=URL; KIND@LEVEL takes that priority "
        "and up (slack@high=URL); repeatable. Rules: <home>/alerts.toml.")] = None,
    preset: Preset = None,
    digest: Digest = None,
    where: Annotated[Optional[str], typer.Option("--where", metavar="EXPR", help=(
        "With ENTITY/PROJECT: fetch only the runs matching EXPR (as `runs --where`: cfg.KEY>=X, group~REGEX, "
        "state:running, tag:T, name~REGEX; -term negates)."))] = None,
    detect: Annotated[bool, typer.Option("--detect", help=(
        "Score every run a project sync brought in for anomalies, even past the 32 it scores by itself."))] = False,
) -> None:
    from marinctl.errors import UserError
    from marinctl.sync.targets import parse_target

    if not interval > 0:
        raise UserError(f"--interval must be a positive number of seconds, not {interval:g}",
                        "marinctl sync TARGET --follow --interval 30")
    targets = targets or ["marin"]
    from marinctl.cli.notify import digest_of, rules_of, sinks_of

    sinks, rules = sinks_of(notify, follow=follow), rules_of(follow=follow, preset=preset)
    digest_s = digest_of(digest, follow=follow)
    select = None
    if where is not None:
        from marinctl.run_query import parse

        select = parse(where)   # a bad term: exit 2 before any request
    try:   # validate before touching network or store (a bare stored run id waits for the store)
        plans = [p for t in targets for p in parse_target(t)]
    except UserError:
        plans = None
    if plans is not None:
        _where_needs_a_project(select, plans)
    remote = [name for kind, name in (("wandb", "W&B"), ("github", "GitHub")) if any(p.kind == kind for p in plans or [])]
    if remote and not json_out:       # said before the slow imports, so a dead network is never silent
        output.info(f"syncing {', '.join(targets)} from {' and '.join(remote)} …")
    from marinctl.store import open_store
    from marinctl.sync import resolve_targets

    store = open_store()
    if plans is None:
        plans = resolve_targets(store, targets)   # a stored run's bare id, or the UserError naming the bad TARGET
    _where_needs_a_project(select, plans)
    if follow and not json_out:
        output.info(f"following {', '.join(targets)}" + ("" if all(p.kind == "local" for p in plans) else
                                                         f" every {interval:g} s") + "; Ctrl-C stops")
    alerting = None
    if follow:
        from marinctl.cli.notify import follow_alerts

        alerting = follow_alerts(store, sinks, rules, quiet=json_out, digest_s=digest_s)
    try:
        if follow and all(p.kind == "local" for p in plans):
            _follow_local(store, plans, json_out=json_out, alerting=alerting)
            return
        _poll(store, targets, plans, follow=follow, interval=interval, json_out=json_out, alerting=alerting,
              select=select, detect=detect)
    finally:
        if alerting is not None:
            from marinctl.cli.notify import close

            close(alerting, quiet=json_out)


def _poll(store, targets, plans, *, follow: bool, interval: float, json_out: bool, alerting, select=None,
          detect: bool = False) -> None:
    """One sync, or with --follow one every `interval` seconds until Ctrl-C (each followed by an alert pass)."""
    from marinctl.errors import is_interrupt
    from marinctl.sources import http
    from marinctl.store.synclock import acquire_all
    from marinctl.sync import lock_key, sync_targets

    progress = _Progress(enabled=not json_out and sys.stderr.isatty())
    total = {"runs": [], "events_added": 0, "timing": {"total_s": 0.0, "wandb_http_s": 0.0}}
    with acquire_all(store, [lock_key(p) for p in plans], owner="sync"), http.notices(_note, connecting=not json_out):
        while True:
            try:
                report = sync_targets(store, targets, progress=progress, warn=_warn, following=follow,
                                      tally=progress.tally, select=select, detect_all=detect)
                if alerting is not None:
                    alerting.after_pass(report.get("synced", []))
            except Exception as exc:   # Ctrl-C inside a DuckDB query arrives as its own exception
                if not (follow and is_interrupt(exc)):
                    raise
                report = None
            except KeyboardInterrupt:
                if not follow:
                    raise
                report = None
            progress.close()
            if report is None:          # --follow stopped mid-round: what was committed stays
                output.info("stopped; everything written so far is kept (`marinctl runs` lists it)")
                break
            total["runs"] += report["runs"]
            total["events_added"] += report["events_added"]
            for k in total["timing"]:
                total["timing"][k] = round(total["timing"][k] + report["timing"][k], 3)
            total.setdefault("warnings", []).extend(report.get("warnings", []))
            if report.get("detection_deferred"):
                total["detection_deferred"] = report["detection_deferred"]
            if not follow:
                break
            if not json_out:
                _say_written(report)
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                break
    if json_out:
        output.print_json(total)
    else:
        _print_human(total)


def _where_needs_a_project(select, plans) -> None:
    from marinctl.errors import UserError

    if select is not None and not any(p.kind == "wandb" and not p.run_id for p in plans):
        raise UserError("--where selects runs of a W&B project; no TARGET here is one",
                        "e.g. `marinctl sync ENTITY/PROJECT --where state:finished`")


def _say_written(report: dict) -> None:
    """One stderr line per run a --follow round wrote to (quiet when nothing changed)."""
    from marinctl import numbers

    for r in report["runs"]:
        if r["rows_added"]:
            output.info(f"{r['run']}: +{numbers.count(r['rows_added'])} rows, last step {numbers.count(r['last_step'])}")
    if report.get("events_added"):
        output.info(f"events added or updated: {report['events_added']}")


def _note(message: str) -> None:
    """Connecting and retry notices from the HTTP clients, one stderr line each, as they happen."""
    from marinctl.text import inert

    output.info(inert(message, single_line=True))


def _warn(message: str) -> None:
    """Warnings the pipeline hands back (a corrupt block, a rate limit), one stderr line each."""
    from marinctl.text import inert

    output.info(f"warning: {inert(message, single_line=True)}")


def _follow_local(store, plans, *, json_out: bool, alerting=None) -> None:
    """Tail local runs record by record (sync.local.follow) until Ctrl-C; when one is due
    (sync/follow_alerts.py `local_pass`), the runs that changed are scored and an alert pass runs."""
    import threading

    from marinctl.store.synclock import acquire_all
    from marinctl.sync import lock_key
    from marinctl.sync.local import follow

    stop = threading.Event()

    def on_update(results: list[dict]) -> None:
        if alerting is not None:
            alerting.changed(results)
        if json_out:
            output.print_json({"runs": results, "events_added": 0})
        else:
            _say_written({"runs": results})

    threads = [threading.Thread(target=follow, args=(store, p.path),
                                kwargs={"stop": stop, "on_update": on_update, "interval": 1.0, "warn": _warn},
                                daemon=True)
               for p in plans]
    with acquire_all(store, [lock_key(p) for p in plans], owner="sync --follow"):
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                time.sleep(0.2)
                if alerting is not None:
                    alerting.local_pass()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)


def _print_human(report: dict) -> None:
    rows = [(r["run"], r["rows_added"], r["first_step"], r["last_step"]) for r in report["runs"]]
    quiet = len(rows) - sum(1 for r in rows if r[1])
    if len(rows) > 20:   # a project: the runs that moved, and how many did not
        rows = [r for r in rows if r[1]]
    if rows:
        output.print_table(["run", "rows added", "first step", "last step"], rows)
    if len(report["runs"]) > 20 and quiet:
        print(f"{quiet} of {len(report['runs'])} runs unchanged")
    if report.get("events_added"):
        print(f"events added or updated: {report['events_added']}")
    if not rows and not report.get("events_added"):
        print("nothing new")


class _Progress:
    """A rich progress bar on stderr for long syncs (silent when not a terminal)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._started: float | None = None   # a project sync's first tally

    def __call__(self, name: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[detail]}"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True)
            self._bar.start()
        from marinctl.text import inert, markup_safe

        if name not in self._tasks:
            label = markup_safe(inert(name, single_line=True)[:40])
            self._tasks[name] = self._bar.add_task(label, total=max(total, 1), detail="")
        self._bar.update(self._tasks[name], completed=done, total=max(total, 1))

    def tally(self, done: int, total: int, rows: int) -> None:
        """A project sync's line: runs done of total, rows added, rate and time left."""
        if not self.enabled:
            return
        import time as clock

        from marinctl import numbers

        now = clock.monotonic()
        self._started = self._started or now
        rate = done / (now - self._started) if now > self._started else 0.0
        line = f"{numbers.count(rows)} rows · {rate:.0f} runs/s" if done else "listing runs …"
        self("runs", done, total)
        self._bar.update(self._tasks["runs"], detail=line)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            self._tasks.clear()
            self._started = None
