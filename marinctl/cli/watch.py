"""`watch` (the live TUI) and `plot` (one chart on stdout, for scripts and pipes).

Both draw what analysis computes (views/chart_data.py and chart_axis.py). `plot` never
imports textual: render/chart.py paints it on plotext's own figure, uncoloured when stdout
is not a terminal.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Annotated, Optional

import typer

from marinctl.cli import complete
from marinctl.cli.notify import Digest, Preset
from marinctl.errors import UserError

# textual-serve runs each tab's watch with pipes for a terminal and this driver speaking to the
# browser (`marinctl serve`): the one way watch runs without a tty
WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("watch", help="The live view of a run: curves with every spike kept, anomaly and GitHub markers, "
                              "lineage, ladder overlays, progress. TARGET: a sync target (`marin`, a W&B URL, "
                              "ENTITY/PROJECT/RUN_ID, a wandb/ dir) or a stored RUN; default: the hero lineage. "
                              "Press ? inside for keys.")(watch)
    app.command("plot", help="A plotext chart of one metric on stdout (min/max envelope per bucket, smoothed line, "
                             "anomaly and event markers).")(plot)


def watch(
    target: Annotated[Optional[str], typer.Argument(metavar="TARGET", help="What to follow (default: the hero lineage).", autocompletion=complete.targets)] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between background syncs.")] = 30.0,
    notify: Annotated[Optional[list[str]], typer.Option(
        "--notify", metavar="SINK", help="Send each new alert (also shown on screen) to SINK — desktop (notify-send), "
        "webhook=URL, slack=URL, discord=URL, exec=COMMAND (JSON on stdin), pushover=USER_KEY or ntfy=URL; "
        "KIND@LEVEL takes that priority and up; repeatable. Rules: <home>/alerts.toml.")] = None,
    preset: Preset = None,
    digest: Digest = None,
) -> None:
    if not interval > 0:
        raise UserError(f"--interval must be a positive number of seconds, not {interval}", "try `marinctl watch --interval 30`")
    from marinctl.cli.notify import digest_of, rules_of, sinks_of

    # bad input: exit 2 before the screen
    sinks, rules = sinks_of(notify, follow=True, tui=True), rules_of(follow=True, preset=preset)
    digest_s = digest_of(digest, follow=True, command="marinctl watch hero")
    if not (sys.stdin.isatty() and sys.stdout.isatty()) and os.environ.get("TEXTUAL_DRIVER") != WEB_DRIVER:
        raise UserError("watch needs an interactive terminal", "for scripts and pipes use `marinctl plot KEY [--run RUN]`")
    # numpy's OpenBLAS starts a thread per core that spins after each call; watch's arrays are small
    # and the spinning took the other core from the start (bench/NOTES.md, "Start-up costs")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from marinctl.tui import startup

    startup.pause()        # the cycle collector, until the first paint (tui/startup.py)
    from marinctl.store import open_store
    from marinctl.tui.first_read import FirstRead

    # TARGET is planned and its first view read in a helper process while Textual is imported here
    early = FirstRead(open_store(), target)
    from marinctl.tui.app import run_watch
    from marinctl.tui.options import WatchOptions

    plan = early.plan()    # bad TARGETs fail here with exit 2, before the screen opens
    asked = [name for name, given in (("--notify", sinks), ("--preset", preset), ("--digest", digest)) if given]
    if asked and not plan[1]:
        early.stop()
        raise UserError(f"{asked[0]} acts on what watch follows, and this view follows no run (the store as is)",
                        f"name what to follow: marinctl watch TARGET {asked[0]} … (a W&B run, a wandb/ dir)")
    run_watch(WatchOptions(target, interval, plan=plan, first_read=early, rules=rules, sinks=sinks, digest_s=digest_s))


def plot(
    key: Annotated[str, typer.Argument(metavar="KEY", help="Metric key, e.g. train/loss.", autocompletion=complete.keys)],
    run: Annotated[Optional[str], typer.Option("--run", help="RUN (default: the hero lineage, or the only run stored).", autocompletion=complete.runs)] = None,
    width: Annotated[Optional[int], typer.Option("--width", help="Columns (default: the terminal's, else 100).")] = None,
    height: Annotated[Optional[int], typer.Option("--height", help="Rows (default: 24).")] = None,
    log_y: Annotated[bool, typer.Option("--log-y", help="Logarithmic y axis.")] = False,
    smoothing: Annotated[str, typer.Option("--smoothing", help="none, ema or debiased.")] = "ema",
    x_axis: Annotated[str, typer.Option("--x", help="step, tokens, fraction or wall.")] = "step",
) -> None:
    from marinctl.views import chart_axis, chart_data
    from marinctl.render.chart import chart_text
    from marinctl.store import open_store
    from marinctl.store import metrics as M
    from marinctl.store import series as S
    from marinctl.store.lineage import resolve_target
    from marinctl.text import inert

    if smoothing not in chart_data.SMOOTHINGS:
        raise UserError(f"unknown smoothing {smoothing!r} (known: {', '.join(chart_data.SMOOTHINGS)})", "try `--smoothing ema`")
    if x_axis not in chart_axis.X_MODES:
        raise UserError(f"unknown x axis {x_axis!r} (known: {', '.join(chart_axis.X_MODES)})", "try `--x step`")
    tty = sys.stdout.isatty()
    cols = width or (shutil.get_terminal_size((100, 24)).columns if tty else 100)
    rows = height or 24
    if cols < 20 or rows < 6:
        raise UserError(f"a {cols}x{rows} chart is too small", "use --width 20 or more and --height 6 or more")
    with open_store().connect() as con:
        target = resolve_target(con, run, stitched=True)
        if not chart_data.has_data(con, target, key):
            import difflib

            keys = M.run_keys(con, target.run_pks)
            close = difflib.get_close_matches(key, keys, n=3)
            raise UserError(
                f"no metric {key!r} stored for {target.name}" + (f" (did you mean {', '.join(close)}?)" if close else ""),
                "list stored keys with `marinctl sql \"SELECT key FROM metric_keys ORDER BY 1\"`",
            )
        lo, hi = S.key_step_range(con, target.segments, [key])
        axis = chart_axis.axis_for(con, target, x_axis, int(lo), int(hi))
        markers = chart_data.markers_for(con, target, int(lo), int(hi))
        panel = chart_data.load_panel(con, target, key, int(lo), int(hi), buckets=max(50, 2 * cols),
                                      smoothing=smoothing, axis=axis, markers=markers)
        if target.name == "hero":        # the hero's eval chart carries the ladder's band, as in watch
            panel.band = chart_data.predicted_band(con, key, axis, every_key=False)
    title = f"{key} — {target.name}" + (f" ({target.leaf['run_id']})" if target.stitched else "")
    text = chart_text(panel, width=cols, height=rows, logy=log_y, axis=axis, title=inert(title, single_line=True),
                      color=tty)
    sys.stdout.write(text + "\n")
