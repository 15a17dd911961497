"""The legend over the charts when other runs are drawn on them: one colour per run, the same on every chart."""

from __future__ import annotations

from rich.text import Text

from marinctl.views.watch_view import View
from marinctl.render.chart import LINE_COLOR, overlay_color
from marinctl.text import inert


def legend_text(view: View) -> Text:
    """`━ hero (stitched)  ━ d768  ━ d1024 (no fraction axis for it)`, coloured like the lines."""
    text = Text()
    if not view.legend:
        return text
    rgb = lambda c: f"rgb({c[0]},{c[1]},{c[2]})"  # noqa: E731
    shown = view.target_name or view.ref or "this run"
    text.append("━ ", style=rgb(LINE_COLOR))
    text.append(inert(str(shown), single_line=True))
    for entry in view.legend:
        text.append("   ━ ", style=rgb(overlay_color(entry.slot)) if not entry.note else "dim")
        text.append(inert(entry.name, single_line=True), style="" if not entry.note else "dim")
        if entry.note:
            text.append(f" ({entry.note})", style="dim")
    return text
