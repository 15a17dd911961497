"""How each chart is drawn, decided from the view and the viewer's choices (any thread, no Textual).

`ChartState` is what the viewer chose (log-y for all or per chart, fitted y ranges, the
cursor); `spec_for` turns it into one chart's `FrameSpec`: log-y, y range, and the words of its title (fitted
to the real width when drawn): the exact value the cursor reads there (`3.2114 @2,990 [3.19…3.30]`),
which `cursor_values` takes from the envelopes or else the store. `page_frames` draws a page's
charts (tui/frames.py), in the app's workers and in the first-read helper process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from marinctl import numbers as N
from marinctl.views.chart_data import Logged
from marinctl.views.watch_view import View
from marinctl.tui.frames import Frame, FrameSpec, chart_size_for, chart_sizes_for, chart_slot


@dataclass(frozen=True)
class ChartState:
    logy: bool = False                          # `Y`: every chart
    logy_keys: frozenset[str] = frozenset()     # `y` on a focused chart flips it against `logy`
    yfit_keys: frozenset[str] = frozenset()     # `a` on a focused chart
    cursor_step: float | None = None            # None: the newest step

    def logy_of(self, key: str) -> bool:
        return self.logy != (key in self.logy_keys)


def value_text(logged: Logged | None, cursor: int | None) -> str:
    """`3.2114`, `10.01 @2,990` (logged before the cursor), `[3.19…3.30]` when the bucket holds more."""
    if logged is None:
        return N.DASH
    text = N.sig(logged.value, missing="nan")
    if cursor is not None and logged.step != cursor:
        text += f" @{N.count(logged.step)}"
    if logged.lo is not None and logged.hi is not None and N.sig(logged.lo) != N.sig(logged.hi):
        text += f" [{N.sig(logged.lo)}…{N.sig(logged.hi)}]"
    return text


def spec_for(view: View, key: str, state: ChartState, values: dict[str, Logged], theme: str) -> FrameSpec:
    step = view_cursor(view, state)
    flags = []
    if state.logy_of(key) and (key in state.logy_keys):
        flags.append("log")
    if key in state.yfit_keys:
        flags.append("y:fit")
    xlim = None
    if view.axis is not None and (view.params.compare or key in view.sampled_keys):   # system samples span less
        lo, hi = view.axis.x([view.lo, view.hi])
        xlim = (float(lo), float(hi))
    return FrameSpec(logy=state.logy_of(key), yfit=key in state.yfit_keys, cursor_step=state.cursor_step,
                     value=value_text(values[key], step) if values.get(key) is not None else "", flags=" ".join(flags),
                     xlim=xlim, theme=theme)


def view_cursor(view: View, state: ChartState) -> int:
    """The step the cursor reads: where it was put, else the view's newest step."""
    return int(round(state.cursor_step)) if state.cursor_step is not None else int(view.hi)


def cursor_values(store, view: View, state: ChartState, *, wait: bool = True) -> dict[str, Logged]:
    """What the cursor reads on each chart: from the envelopes when they can tell, else from the store
    (not waiting for another process's hold on it unless `wait`)."""
    from marinctl.store.series import values_at_or_before

    if view.error or view.axis is None:
        return {}
    step = view_cursor(view, state)
    values = view.readout(step)
    missing = [p.key for p in view.panels + view.system_panels if p.key not in values]
    if not missing:
        return values
    try:
        from marinctl.store.lineage import resolve_target

        with store.connect(lock_timeout=None if wait else 0.0) as con:
            target = resolve_target(con, view.params.ref, stitched=True)
            got = values_at_or_before(con, target.segments, missing, step, since=view.lo)
    except Exception:  # noqa: BLE001 — the readout then says '…' for those keys
        return values
    panels = {p.key: p for p in view.panels + view.system_panels}
    for key, (s, v) in got.items():
        env = panels[key].envelope_around(s)
        values[key] = Logged(s, v, *(env or (None, None)))
    return values


def page_frames(view: View, job: dict[str, Any], values: dict[str, Logged],
                cancelled: Callable[[], bool] = lambda: False) -> dict[str, Frame]:
    """Frames for every chart of the view at the size it will have on screen, by chart slot (a key
    shown twice, in the overview and in its own section, may have two sizes: one frame each).
    `job` says what the screen holds (tui/loader.py `paint_job`); a frame in `job["shown"]` (on
    screen) or `job["early"]` (the helper's) that is this very panel drawn the same way is kept."""
    if view.error or view.axis is None:
        return {}
    headers = len(view.sections)
    size = chart_size_for(*job["page"], view.params.cols, view.params.rows, headers)
    # on an unchanged layout each chart's real size; else each one's place in the grid to come
    guess = chart_sizes_for(*job["page"], view.params.cols, view.params.rows, view.sections)
    same = job["layout"] == (view.params.cols, view.params.rows, headers)
    panels = {p.key: p for p in view.panels}
    slots = [(chart_slot(s, k), panels[k]) for s in view.sections for k in s.keys if k in panels]
    sized = [(slot, p, (job["sizes"] if same else guess).get(slot, guess.get(slot, size))) for slot, p in slots]
    if job["system"] is not None:
        sized += [(p.key, p, job["system"]) for p in view.system_panels]
    early = job.get("early") or {}
    out, built = {}, {}
    for slot, panel, sz in sized:
        if cancelled():
            break
        if (panel.key, sz) not in built:
            spec = spec_for(view, panel.key, job["state"], values, job["theme"])
            # a re-read that changed nothing (the key list arriving, an idle poll) redraws nothing
            kept = [f for f in (job["shown"].get(slot), early.get(slot))
                    if f is not None and f.size == sz and f.token == (id(panel), spec)]
            built[panel.key, sz] = kept[0] if kept else job["figures"].frame(panel, view.axis, spec, sz)
        out[slot] = built[panel.key, sz]
    return out
