"""What `watch` remembers between launches, per store: grid size, filters, collapsed sections, panes.

One small JSON file under the data home (`watch-settings.json`), keyed by the store's path, so
two stores keep two layouts. A missing or damaged file means the defaults; saving never
raises (a read-only home just forgets).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

FILE_NAME = "watch-settings.json"
MAX_COLS, MAX_ROWS = 6, 8
MIN_PANE, MAX_PANE = 24, 160
# the screen around the chart page (tui/app.tcss): the header's 3 lines, the cursor bar and the
# footer below the page, the runs sidebar on its left; the run/system panes on its right when open
CHROME_LINES, SIDEBAR_COLUMNS = 5, 34


@dataclass
class Layout:
    cols: int = 2
    rows: int = 4
    pattern: str | None = None
    collapsed: list[str] = field(default_factory=list)
    smoothing: str = "ema"
    xmode: str = "step"
    logy: list[str] = field(default_factory=list)     # charts with their own log-y
    run_pane: bool = False
    system_pane: bool = False
    pane_width: int = 46                               # columns of the run/system panes (`{` `}`)
    run_filter: str | None = None                      # the runs sidebar's `--where` expression (`f`)

    def clamp(self) -> "Layout":
        self.cols = min(MAX_COLS, max(1, int(self.cols)))
        self.rows = min(MAX_ROWS, max(1, int(self.rows)))
        self.pane_width = min(MAX_PANE, max(MIN_PANE, int(self.pane_width)))
        return self


def settings_path() -> Path:
    from marinctl import paths

    return paths.home() / FILE_NAME


def load(store_key: str) -> Layout:
    """What was remembered for the store `store_key` names (`Store.settings_key`)."""
    try:
        everything = json.loads(settings_path().read_text())
        mine = everything.get(store_key, {})
        known = {k: v for k, v in mine.items() if k in Layout.__dataclass_fields__}
        return Layout(**known).clamp()
    except (OSError, ValueError, TypeError, AttributeError):
        return Layout()


def save(store_key: str, layout: Layout) -> None:
    path = settings_path()
    try:
        try:
            everything = json.loads(path.read_text())
            everything = everything if isinstance(everything, dict) else {}
        except (OSError, ValueError):
            everything = {}
        everything[store_key] = asdict(layout)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(everything, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass
