"""The alert side of a follow loop (`sync --follow [--notify SINK]…`): rules read, alerts fired after
each pass, said on stderr and handed to the sinks.

`--notify` values and `<home>/alerts.toml` are checked before anything is synced (exit 2
naming the problem). A pass that fails (a busy store) is said once and tried again at the next
pass; it never ends the follow.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any, Optional, Sequence

import typer

from marinctl.cli import output

# the on-call options `sync --follow` and `watch` both take
Preset = Annotated[Optional[str], typer.Option("--preset", metavar="NAME", help=(
    "Add a shipped preset's rules to what the follow raises (marin-hero: Marin's hero-monitor thresholds; "
    "`marinctl alerts --preset marin-hero --show` prints them)."))]
Digest = Annotated[Optional[str], typer.Option("--digest", metavar="DURATION", help=(
    "While following, every DURATION (30s, 10m, 1h) one low-priority line per followed run — step, steps/s, ETA, "
    "loss against its trend, alerts since the last — said (stderr; watch: on screen) and sent to the sinks; "
    "says when a run went silent."))]


def sinks_of(specs: Sequence[str] | None, *, follow: bool, tui: bool = False) -> list:
    """The `--notify` values as sinks (exit 2 on a bad one, or without --follow). `tui`: for
    `watch`, whose screen the terminal's own notification escape would garble (notify-send only)."""
    from marinctl.errors import UserError
    from marinctl.sync.sinks import desktop_available, parse

    if not specs:
        return []
    if not follow:
        raise UserError("--notify sends the alerts a follow raises: add --follow",
                        "marinctl sync TARGET --follow --notify webhook=URL")
    sinks = [parse(s) for s in specs]
    if any(s.kind == "desktop" for s in sinks) and not desktop_available(
            _terminal if sys.stderr.isatty() and not tui else None):
        raise UserError("--notify desktop needs notify-send" + (" (watch shows each alert on its own screen)" if tui else
                        " or a terminal to show notifications in; neither is here"),
                        "use --notify webhook=URL, slack=URL, discord=URL or exec=COMMAND")
    return sinks


def _terminal(escape: str) -> bool:
    """Write a notification escape to the terminal on stderr (False when stderr is not one)."""
    if not sys.stderr.isatty():
        return False
    sys.stderr.write(escape)
    sys.stderr.flush()
    return True


def rules_of(*, follow: bool, preset: str | None = None):
    """`<home>/alerts.toml` read when following, with `--preset`'s rules (exit 2 naming what is wrong)."""
    from marinctl.errors import UserError

    if not follow:
        if preset is not None:
            raise UserError("--preset adds rules to what a follow raises: add --follow",
                            "marinctl sync hero --follow --preset marin-hero")
        return None
    from marinctl import paths
    from marinctl.analysis.alerts.rules import load

    rules = load(paths.home())
    return rules.with_preset(preset) if preset is not None else rules


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh])\s*$")


def digest_of(text: str | None, *, follow: bool, command: str = "marinctl sync hero --follow") -> float | None:
    """`--digest DURATION` (`30s`, `10m`, `1h`) in seconds (exit 2 on anything else, or without --follow);
    `command`: what the hint shows it on."""
    from marinctl.errors import UserError
    from marinctl.text import inert

    if text is None:
        return None
    hint = f"{command} --digest 10m   (Ns, Nm or Nh)"
    if not follow:
        raise UserError("--digest is sent while following: add --follow", hint)
    m = _DURATION.match(text)
    seconds = float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)] if m else 0.0
    if not seconds > 0:
        raise UserError(f"--digest takes a duration such as 30s, 10m or 1h, not {inert(text, single_line=True)[:30]!r}",
                        hint)
    return seconds


def follow_alerts(store, sinks: Sequence, rules, *, quiet: bool, digest_s: float | None = None):
    """The follow's FollowAlerts (sync/follow_alerts.py), saying new alerts, digests and failed
    passes or deliveries on stderr (nothing with `quiet`: --json)."""
    from marinctl.sync.follow_alerts import FollowAlerts

    alerts = FollowAlerts(store, rules, sinks, said=None if quiet else _say, problem=None if quiet else _warn,
                          terminal=_terminal, digest_s=digest_s, told=None if quiet else _tell)
    if sinks and not quiet:
        output.info("alerts go to " + ", ".join(s.label for s in sinks))
    return alerts


def close(alerts, *, quiet: bool) -> None:
    """Stop delivering (bounded); say how many deliveries the next follower will make."""
    waiting = alerts.close()
    if waiting and not quiet:
        output.info(f"{waiting} alert deliveries not done; `marinctl alerts` lists them, and the next"
                    " follower of these runs sends them")


def _say(new: list[dict[str, Any]]) -> None:
    from marinctl.analysis.alerts import priority
    from marinctl.text import inert

    for alert in new:
        output.info(f"alert ({priority.of(alert)} · {alert['cause_class']}): {inert(alert['title'], single_line=True)}"
                    f" — {inert(alert['command'], single_line=True)}")


def _tell(lines: list[str]) -> None:
    from marinctl.text import inert

    for line in lines:
        output.info(f"digest: {inert(line, single_line=True)}")


def _warn(message: str) -> None:
    from marinctl.text import inert

    output.info(f"warning: {inert(message, single_line=True)}")
