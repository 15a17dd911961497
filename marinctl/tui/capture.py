"""Plain-text capture of the running app's screen (for the README and for tests that read the screen).

Textual exports a screen only as SVG (`App.export_screenshot`, which renders the compositor the
same way); this renders it as text, here and nowhere else.
"""

from __future__ import annotations

import io

from rich.console import Console
from textual.app import App


def screen_text(app: App) -> str:
    """What the terminal shows now, as text (the SVG screenshot's content without styles)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    lines = console.export_text(styles=False).splitlines()
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"
