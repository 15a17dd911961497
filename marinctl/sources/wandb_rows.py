"""W&B history values decoded: JSON history rows to long Arrow batches, W&B values to floats.

The long batch (step int64, key string, value float64) is what the store's metrics writers
take (`store.metrics.replace_range`); only numeric scalars and bools become values. A nested
dict is flattened as W&B flattens it: `{"train": {"loss": x}}` is the key `train.loss`, a key
of its own next to a flat `train/loss`.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa


def batch_from_rows(rows: Iterable[dict], step_key: str = "_step") -> pa.Table:
    """Long batch from W&B-style row dicts; keeps numeric scalars (bools as 0/1), drops the rest.

    The hot loop of a JSON-window sync, so the common types are tested inline, and a row's step
    is kept once with how many values it gave (repeated by NumPy) rather than once per value.
    """
    import numpy as np

    steps: list[int] = []
    counts: list[int] = []
    keys: list[str] = []
    values: list[float] = []
    add_k, add_v = keys.append, values.append
    for row in rows:
        step = row.get(step_key)
        if step is None:
            continue
        before = len(keys)
        for k, v in row.items():
            t = type(v)
            if t is float:
                if k != step_key:
                    add_k(k)
                    add_v(v)
            elif t is int:
                if k != step_key:
                    add_k(k)
                    add_v(float(v))
            elif t is bool or t is str:
                f = as_float(v)
                if f is not None:
                    add_k(k)
                    add_v(f)
            elif t is dict and k != step_key:
                for sub, f in _nested(k, v):
                    add_k(sub)
                    add_v(f)
        steps.append(int(step))
        counts.append(len(keys) - before)
    return pa.table({"step": pa.array(np.repeat(np.asarray(steps, np.int64), counts), pa.int64()),
                     "key": pa.array(keys, pa.string()), "value": pa.array(values, pa.float64())})


def _nested(prefix: str, value: dict) -> Iterable[tuple[str, float]]:
    """A nested dict's numeric leaves as W&B names them (`train.loss`); media objects
    (dicts with a `_type`, such as histograms) are not metrics and are skipped."""
    if "_type" in value:
        return
    for k, v in value.items():
        key = f"{prefix}.{k}"
        if isinstance(v, dict):
            yield from _nested(key, v)
        else:
            f = as_float(v)
            if f is not None:
                yield key, f


def as_float(v) -> float | None:
    """W&B values to DOUBLE: numbers and bools; 'NaN'/'Infinity' strings; None for the rest."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in ("NaN", "nan", "Infinity", "-Infinity", "inf", "-inf"):
        return float(v.replace("Infinity", "inf"))
    return None


def max_step(batch: pa.Table) -> int:
    """The largest step in a non-empty long batch."""
    import pyarrow.compute as pc

    return int(pc.max(batch.column("step")).as_py())
