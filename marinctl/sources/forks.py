"""Marin's fork convention: `fork_from = "parent?_step=N"` somewhere in a run's config.

Read by remote runs (sources/wandb.py) and local `.wandb` runs (sources/wandb_records.py) alike;
its own module so a local sync does not import the HTTP client to find it.
"""

from __future__ import annotations

import re
from typing import Any

_FORK = re.compile(r"^(?P<parent>[^?]+)\?_step=(?P<step>\d+)$")


def find_fork(config: Any) -> tuple[str, int] | None:
    """A `fork_from = "parent?_step=N"` anywhere in the config (Marin's tracker config)."""
    stack = [config]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for k, v in cur.items():
                if k == "fork_from" and isinstance(v, str) and (m := _FORK.match(v.strip())):
                    return m.group("parent"), int(m.group("step"))
                stack.append(v)
        elif isinstance(cur, list):
            stack.extend(cur)
    return None
