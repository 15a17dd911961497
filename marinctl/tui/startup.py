"""`watch`'s start: Python's cycle collector paused until the first view is on the screen.

Importing Textual, NumPy and plotext and laying the screen out allocate tens of thousands of
objects that live as long as the app. The collector would walk them again and again as they
come, on the way to the first chart, and find next to nothing to free.
`pause` stops it for the start; `resume` (at the first paint, RESUME_AFTER_S at the latest)
moves what was allocated so far out of its reach for good (`gc.freeze`: later collections skip
the app's long-lived objects) and starts it again.
"""

from __future__ import annotations

import gc

RESUME_AFTER_S = 5.0    # a start that never paints (an error screen, a store that stays locked)
_paused = False


def pause() -> None:
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Start the collector again if `pause` stopped it; else leave it as it is (a caller may
    run with it off on purpose)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
