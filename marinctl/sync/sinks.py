"""Where alerts go (`--notify SINK`), and each sink's shape of an alert, made inert for it.

- `webhook=URL`: the generic JSON body (the contract's fields, plus a few) POSTed to URL.
- `slack=URL`, `discord=URL`: their incoming-webhook shapes. Run and metric names are W&B's
  text: in Slack's mrkdwn `&`, `<` and `>` are escaped (so `<!channel>`, `<@U…>` and
  `<url|label>` cannot form), `@` cannot start a mention, and names sit in code spans; in
  Discord's markdown every markdown character is backslash-escaped, names sit in code spans,
  and `allowed_mentions` is empty so nothing pings anyone. In both, a URL inside a name is
  broken so it cannot become a link.
- `exec=COMMAND`: COMMAND run by the shell with the generic JSON on its standard input;
  exit status 0 accepts it.
- `desktop`: `notify-send` where it exists (its body markup escaped, `--` before the text),
  else the terminal's own notification escape (OSC 777 for the terminals that speak it, OSC 9
  otherwise), written by the caller's `terminal` callback.
- `pushover=USER_KEY` and `ntfy=URL` (a topic's URL): a phone's notification at the alert's
  priority (sync/phones.py).

Every sink takes alerts from a minimum priority up, `KIND@LEVEL…` (`slack@high=URL`,
`pushover@emergency=KEY`, `desktop@normal`); the default takes every alert (low and up).
No secret goes into a body: W&B's and GitHub's tokens, every sink's own URL or command, and
credentials inside any URL are replaced by `[redacted]` in every string of every body.
Every try is bounded by `timeout`.

Every alert carries an idempotency key, the same in every try, from every follower and after
any restart (a digest of the alert's identity: run, cause, episode start): the generic JSON's
`idempotency_key`, Slack's message `metadata`, and the `Idempotency-Key` header of every HTTP
sink. A follower killed between a sink's answer and the store's record of it sends the alert
again after its claim lapses; a receiver that keeps the keys it has seen drops that resend.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

from marinctl import numbers as N
from marinctl.analysis.alerts import priority as P
from marinctl.errors import UserError
from marinctl.text import inert

KINDS = ("desktop", "webhook", "slack", "discord", "exec", "pushover", "ntfy")
URL_KINDS = ("webhook", "slack", "discord", "ntfy")
GENERIC_FIELDS = ("run", "step", "metric", "cause_class", "severity", "title", "summary", "command")
_HINT = ("--notify desktop | webhook=URL | slack=URL | discord=URL | exec=COMMAND | pushover=USER_KEY | ntfy=URL,"
         " each as KIND@LEVEL… to take LEVEL and up (repeatable)")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_SECRET_PARAM = re.compile(r"(?i)([?&](?:token|access_token|api_key|apikey|key|secret|password|sig|signature)=)[^&\s#]+")
_WORD_JOINER = "\u2060"
Terminal = Callable[[str], bool]   # writes a notification escape to the user's terminal; False: there is none


@dataclass(frozen=True)
class Sink:
    kind: str
    target: str = ""    # the URL, user key or COMMAND (a secret: never printed, stored or sent)
    min_level: str = "low"

    def takes(self, alert: dict[str, Any]) -> bool:
        """Whether the alert's priority reaches this sink's minimum."""
        return P.at_least(P.of(alert), self.min_level)

    @property
    def id(self) -> str:
        """What the store keeps of the sink: its kind and a digest of its target (never the target)."""
        if not self.target:
            return self.kind
        digest = hashlib.sha256(f"{self.kind}\0{self.target}".encode()).hexdigest()[:16]
        return f"{self.kind}:{digest}"

    @property
    def label(self) -> str:
        """What messages may say of the sink: its kind and, for a URL, its host."""
        from marinctl.sources.webhook import where

        if self.kind in URL_KINDS:
            return f"{self.kind} ({where(self.target)})"
        if self.kind == "pushover":
            from marinctl.sources import pushover

            return f"pushover ({where(pushover.base_url())})"
        return self.kind


def parse(spec: str) -> Sink:
    """A `--notify` value (`KIND[@LEVEL][=TARGET]`) as a Sink; UserError (exit 2) naming what is wrong."""
    head, sep, target = spec.partition("=")
    kind, at, level = head.strip().lower().partition("@")
    kind = kind.strip()
    if kind not in KINDS:
        raise UserError(f"unknown --notify sink {inert(kind, single_line=True)[:40]!r}", _HINT)
    level = level.strip() if at else "low"
    if level not in P.LEVELS:
        raise UserError(f"--notify {kind}@{inert(level, single_line=True)[:20]}: the level is one of"
                        f" {', '.join(P.LEVELS)} (the lowest priority the sink takes)", _HINT)
    if kind == "desktop":
        if sep:
            raise UserError("--notify desktop takes no value", _HINT)
        return Sink("desktop", min_level=level)
    if not sep or not target.strip():
        wants = {"exec": "COMMAND", "pushover": "USER_KEY"}.get(kind, "URL")
        raise UserError(f"--notify {kind}= needs a {wants}", _HINT)
    target = target.strip()
    if kind in URL_KINDS:
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname or " " in target:
            raise UserError(f"--notify {kind}= needs an http(s) URL (the value given is not one)", _HINT)
    if kind in ("pushover", "ntfy"):
        from marinctl.sync import phones

        phones.check(kind, target)
    return Sink(kind, target, level)


# --- secrets -------------------------------------------------------------------------------------

def secrets(sinks: Sequence[Sink]) -> tuple[str, ...]:
    """The strings no body may carry: tokens marinctl reads, and every sink's URL or command."""
    found = [os.environ.get(k, "").strip() for k in ("WANDB_API_KEY", "GITHUB_TOKEN", "GH_TOKEN",
                                                      "PUSHOVER_APP_TOKEN", "NTFY_TOKEN")]
    try:
        from marinctl.sources import wandb as wandb_source

        found.append(wandb_source.api_key(wandb_source.base_url()) or "")
    except Exception:  # noqa: BLE001 — an unreadable netrc holds no key to hide
        pass
    found += [s.target for s in sinks if s.target]
    for s in sinks:   # Slack/Discord URLs: their secret path alone too; an ntfy topic is its secret
        if s.kind in URL_KINDS:
            path = urlsplit(s.target).path.strip("/")
            if len(path) >= 12:
                found.append(path)
            if s.kind == "ntfy":
                found.append(path.rsplit("/", 1)[-1])
    return tuple(sorted({x for x in found if len(x) >= 6}, key=len, reverse=True))


def scrub(text: str, hidden: Sequence[str]) -> str:
    for secret in hidden:
        text = text.replace(secret, "[redacted]")
    text = _URL_CREDENTIALS.sub(r"\1[redacted]@", text)
    return _SECRET_PARAM.sub(r"\1[redacted]", text)


def _scrubbed(obj: Any, hidden: Sequence[str]) -> Any:
    if isinstance(obj, str):
        return scrub(obj, hidden)
    if isinstance(obj, dict):
        return {k: _scrubbed(v, hidden) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrubbed(v, hidden) for v in obj]
    return obj


# --- shapes --------------------------------------------------------------------------------------

def idempotency_key(alert: dict[str, Any]) -> str:
    """The alert's key for receivers that drop resends: a digest of its identity (run, cause,
    episode start), the same from any follower, store or restart."""
    ident = f"{alert['run_uid']}\x1f{alert.get('cause') or alert['kind']}\x1f{int(alert['episode_start'])}"
    return "marinctl-" + hashlib.sha256(ident.encode()).hexdigest()[:32]


def generic(alert: dict[str, Any], hidden: Sequence[str] = ()) -> dict[str, Any]:
    """The contract's body: run, step, metric, cause_class, severity, title, summary, command (and more)."""
    fired = alert.get("fired_at")
    body = {
        "run": _t(alert.get("run_id") or alert["run_uid"]), "step": int(alert["step"]), "metric": _t(alert.get("metric")) or None,
        "cause_class": alert["cause_class"], "severity": alert["severity"], "priority": P.of(alert),
        "title": _t(alert["title"]),
        "summary": _t(alert.get("summary")) or None, "command": _t(alert["command"]),
        "kind": alert["kind"], "run_name": _t(alert.get("name")) or None, "run_uid": _t(alert["run_uid"]),
        "episode": {"start": int(alert["episode_start"]), "end": int(alert["episode_end"])},
        "alert_id": int(alert["alert_id"]) if alert.get("alert_id") is not None else None,
        "idempotency_key": idempotency_key(alert),
        "fired_at": fired.astimezone(timezone.utc).isoformat() if hasattr(fired, "astimezone") else fired,
        "source": "marinctl",
    }
    return _scrubbed(body, hidden)


def slack(alert: dict[str, Any], hidden: Sequence[str] = ()) -> dict[str, Any]:
    """Slack's incoming-webhook shape: one mrkdwn `text`, links and media not unfurled."""
    g = generic(alert, hidden)
    text = _chat_text(g, bold="*", prose=_slack_prose, code=_slack_code)
    return {"text": text, "mrkdwn": True, "unfurl_links": False, "unfurl_media": False,
            "metadata": {"event_type": "marinctl_alert", "event_payload": {"idempotency_key": g["idempotency_key"],
                                                                           "alert_id": g["alert_id"]}}}


def discord(alert: dict[str, Any], hidden: Sequence[str] = ()) -> dict[str, Any]:
    """Discord's incoming-webhook shape: `content` with no mention allowed to ping."""
    text = _chat_text(generic(alert, hidden), bold="**", prose=_discord_prose, code=_discord_code)
    return {"content": text[:1990], "allowed_mentions": {"parse": []}}


def _chat_text(g: dict[str, Any], *, bold: str, prose: Callable[[str], str], code: Callable[[str], str]) -> str:
    """The lines a chat shows (headline, where, summary, the command), each piece made inert by the
    chat's own `prose` and `code` escapes."""
    lines = [f"{bold}{g['priority'].upper()} · {g['cause_class']}{bold} — {prose(g['title'])}",
             " · ".join(x for x in (code(g["run_name"] or g["run"]), f"step {N.count(g['step'])}",
                                    code(g["metric"]) if g["metric"] else "") if x)]
    if g["summary"]:
        lines.append(prose(g["summary"]))
    lines.append(f"Look closer: {code(g['command'])}")
    return "\n".join(lines)


def _t(text: Any) -> str:
    return inert(text, single_line=True) if text is not None else ""


def _break_links(text: str) -> str:
    return text.replace("://", ":" + _WORD_JOINER + "//")


def _slack_escape(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"@(?=\w)", "@" + _WORD_JOINER, text)


def _slack_prose(text: str) -> str:
    return _slack_escape(_break_links(text))


def _slack_code(text: str) -> str:
    return "`" + _slack_escape(_break_links(text.replace("`", "ˋ"))) + "`"


_DISCORD_MARKDOWN = re.compile(r"([\\*_~|`>#\[\]()<@:\-])")


def _discord_prose(text: str) -> str:
    return _DISCORD_MARKDOWN.sub(r"\\\1", text)


def _discord_code(text: str) -> str:
    return "`" + _break_links(text.replace("`", "ˋ")) + "`"


# --- sending -------------------------------------------------------------------------------------

def payload(sink: Sink, alert: dict[str, Any], hidden: Sequence[str]) -> bytes:
    """The bytes a sink receives (JSON for every sink but desktop)."""
    shape = {"slack": slack, "discord": discord}.get(sink.kind, generic)
    return json.dumps(shape(alert, hidden), ensure_ascii=True, allow_nan=False).encode()


def send(sink: Sink, alert: dict[str, Any], *, hidden: Sequence[str], timeout: float,
         terminal: Terminal | None = None) -> str | None:
    """One try; None when the sink accepted the alert, else why not (naming no secret)."""
    return deliver(sink, alert, hidden=hidden, timeout=timeout, terminal=terminal)[0]


def deliver(sink: Sink, alert: dict[str, Any], *, hidden: Sequence[str], timeout: float,
            terminal: Terminal | None = None) -> tuple[str | None, str | None]:
    """One try: (why it failed or None, the sink's receipt for repeats it makes until cancelled)."""
    if sink.kind in ("pushover", "ntfy"):
        from marinctl.sync import phones

        return phones.send(sink, generic(alert, hidden), timeout=timeout, key=idempotency_key(alert))
    if sink.kind in ("webhook", "slack", "discord"):
        from marinctl.sources.webhook import post_json

        return post_json(sink.target, payload(sink, alert, hidden), timeout=timeout,
                         headers={"Idempotency-Key": idempotency_key(alert)}), None
    if sink.kind == "exec":
        return _run(sink.target, payload(sink, alert, hidden), timeout), None
    return _desktop(generic(alert, hidden), timeout, terminal), None


def _run(command: str, body: bytes, timeout: float) -> str | None:
    try:
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return f"cannot start the exec sink's command ({exc.strerror})"
    try:
        proc.communicate(body, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"the exec sink's command did not finish within {timeout:g} s"
    return None if proc.returncode == 0 else f"the exec sink's command exited {proc.returncode}"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass


def desktop_available(terminal: Terminal | None) -> bool:
    return shutil.which("notify-send") is not None or terminal is not None


def _desktop(g: dict[str, Any], timeout: float, terminal: Terminal | None) -> str | None:
    title = f"marinctl: {g['title']}"
    text = " ".join(x for x in (g["summary"], g["command"]) if x)
    exe = shutil.which("notify-send")
    if exe:
        markup = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        urgency = {"emergency": "critical", "high": "critical", "normal": "normal"}.get(g["priority"], "low")
        try:
            done = subprocess.run([exe, "--app-name=marinctl", f"--urgency={urgency}", "--", title[:200], markup[:1000]],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"notify-send did not finish within {timeout:g} s"
        except OSError as exc:
            return f"cannot run notify-send ({exc.strerror})"
        return None if done.returncode == 0 else f"notify-send exited {done.returncode}"
    if terminal is None or not terminal(osc_notification(title, text)):
        return "no notify-send here, and no terminal to show a notification in"
    return None


def osc_notification(title: str, body: str, term: str | None = None) -> str:
    """The terminal's own notification escape: OSC 777 (rxvt, foot, Ghostty) or OSC 9 (iTerm2,
    kitty, WezTerm, Windows Terminal). The text has no control character left (inert), and no
    `;` in OSC 777's fields, which it separates."""
    term = (term if term is not None else f"{os.environ.get('TERM', '')} {os.environ.get('TERM_PROGRAM', '')}").lower()
    title, body = inert(title, single_line=True)[:120], inert(body, single_line=True)[:400]
    if any(t in term for t in ("rxvt", "foot", "ghostty")):
        return f"\x1b]777;notify;{title.replace(';', ',')};{body.replace(';', ',')}\x07"
    return f"\x1b]9;{title}: {body}\x07"
