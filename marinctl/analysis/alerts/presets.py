"""Shipped presets: files of ordinary alert rules (`marinctl/data/preset-NAME.toml`), each with its source.

A preset is what a person could have written in `<home>/alerts.toml` — `marin-hero` is Marin's
hero monitor's published thresholds on the keys the hero logs to W&B — so `alerts --preset NAME
--show` prints it to copy and change, and `preset = "NAME"` (or `--preset NAME`) adds its rules.
"""

from __future__ import annotations

from importlib import resources

from marinctl.errors import UserError

_PREFIX, _SUFFIX = "preset-", ".toml"


def names() -> list[str]:
    """The shipped presets, by name."""
    return sorted(f.name[len(_PREFIX):-len(_SUFFIX)] for f in resources.files("marinctl.data").iterdir()
                  if f.name.startswith(_PREFIX) and f.name.endswith(_SUFFIX))


def text(name: str) -> str:
    """A preset's file, as `alerts.toml` text; UserError naming the presets there are."""
    if name not in names():
        from marinctl.text import inert

        raise UserError(f"no alert preset named {inert(name, single_line=True)[:60]!r} (there is: {', '.join(names())})",
                        f"marinctl alerts --preset {names()[0]} --show")
    return resources.files("marinctl.data").joinpath(f"{_PREFIX}{name}{_SUFFIX}").read_text(encoding="utf-8")


def rules(name: str):
    """A preset's rules (analysis/alerts/rules.py `Rules`)."""
    from marinctl.analysis.alerts.rules import parse

    return parse(text(name), f"preset {name}")
