"""marinctl: follow and reproduce open LLM training runs from the terminal — and from Python.

    import marinctl
    m = marinctl.open()                        # read-only: the store `marinctl sync` fills
    m.history("hero", keys=["train/loss"]).df()

Kept import-free on purpose: `marinctl --help` must stay fast, so nothing heavy (textual,
torch, wandb, duckdb) is imported until a command needs it. The Python API's names (`__all__`,
the stable contract) are reached through the module `__getattr__` below, on first use:
`marinctl.open`/`Mirror` from `marinctl/api.py`, the error classes from `marinctl/errors.py`.
That function is the ground floor's one door to the api layer (ARCHITECTURE.md, Layers).
"""

__version__ = "0.1.0"

__all__ = [
    "open", "Mirror",
    "MarinctlError", "UserError", "RuntimeFailure",
    "UnknownRun", "AmbiguousRun", "UnknownStep", "UnknownMetric", "NoStore", "StoreLocked",
    "__version__",
]

_API = frozenset({"open", "Mirror"})
_ERRORS = frozenset(__all__) - _API - {"__version__"}


def __getattr__(name: str):
    if name in _API:
        from marinctl import api

        value = getattr(api, name)
    elif name in _ERRORS:
        from marinctl import errors

        value = getattr(errors, name)
    else:
        raise AttributeError(f"module 'marinctl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
