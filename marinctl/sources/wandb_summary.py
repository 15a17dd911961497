"""A local run's summary as W&B shows it, replayed from the summary records of its `.wandb` log.

wandb-core writes the summary it computes into the log itself: right before each history
record, one *row summary* holding that step's keys, already reduced by
`define_metric(k, summary="min|max|mean|last|first")` (`{"min": 3.0}`; nothing for
`summary="none"`), and between logs the records `run.summary[k] = v` wrote and a runtime
tick. W&B's summary is every update applied in file order — `wandb leet inspect --summary`
folds them the same way — so overrides after the last log win, and strings, lists and
media summaries are kept. A `null` update (what the SDK writes for a NaN set through
`run.summary`) leaves no value, as in LEET.

Row summaries are two thirds of a file's records, so they are parsed in one C pass into flat
columns keeping only each key's last value; the rest are parsed one by one. Files whose row
summaries carry nested keys (`{"train": {"loss": x}}`) take the one-by-one path throughout.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from marinctl.sources import wandb_file as wf

# Record{summary{update{nested_key:"\0", value_json:"0"}}}: marks record boundaries in a merged parse
_SENTINEL = b"\x1a\x09\x0a\x07\x12\x01\x00\x82\x01\x01\x30"
_REMOVE = object()


def apply(summary: dict[str, Any], records: list) -> None:
    """Apply the SUMMARY records among a window's (end, type, payload) records to `summary`, in place."""
    row, other = [], []
    for i, (_end, rt, _payload) in enumerate(records):
        if rt == wf.SUMMARY:
            before_history = i + 1 < len(records) and records[i + 1][1] == wf.HISTORY
            (row if before_history else other).append(i)
    # Only the last set and the last removal of each exact path can matter: applied in file
    # order they fold to what every update in order would. JSON is decoded for those only.
    last_set: dict[tuple, tuple[int, int, Any, bool]] = {}   # path -> (record index, order, value, raw JSON?)
    last_del: dict[tuple, tuple[int, int]] = {}
    last = _last_per_key([records[i][2] for i in row]) if row else {}
    if last is None:
        other = sorted(row + other)
    else:
        last_set = {(key,): (row[k], 0, value, False) for key, (k, value) in last.items()}
    for i in other:
        s = wf.parse_record(records[i][2]).summary
        for n, it in enumerate(s.update):
            path = (it.key,) if it.key else tuple(it.nested_key)
            if path not in last_set or last_set[path][:2] < (i, n):
                last_set[path] = (i, n, it.value_json, True)
        for n, it in enumerate(s.remove):
            last_del[(it.key,) if it.key else tuple(it.nested_key)] = (i, len(s.update) + n)
    steps = [(i, n, path, _REMOVE) for path, (i, n) in last_del.items()]
    steps += [(i, n, path, wf.json_value(v) if raw else v) for path, (i, n, v, raw) in last_set.items()]
    steps.sort(key=lambda u: (u[0], u[1]))
    for _i, _n, path, value in steps:
        if value is _REMOVE or value is None:
            wf.apply_items(summary, (), [list(path)])
        else:
            wf.apply_items(summary, [(list(path), value)])


@lru_cache(maxsize=1)
def _columns():
    """A message type overlaying Record.summary.update with flat repeated columns."""
    return wf.overlay("marinctl_sum", {
        "ItemCols": [("key", 1, "bytes", True), ("nested_key", 2, "bytes", True), ("value_json", 16, "bytes", True)],
        "SumCols": [("update", 1, "ItemCols", False), ("remove", 2, "ItemCols", False)],
        "RecCols": [("summary", 3, "SumCols", False)],
    })["RecCols"]


def _last_per_key(payloads: list) -> dict[str, tuple[int, Any]] | None:
    """{key: (index of the record that set it last, value)} over row summaries, in one parse.

    None when the layout is not the plain one (a nested or `key` item, a removal): the
    caller then parses every record.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    merged = _columns()()
    merged.ParseFromString(_SENTINEL.join(payloads) + _SENTINEL)
    up = merged.summary.update
    if len(up.nested_key) != len(up.value_json) or len(up.key) or len(merged.summary.remove.value_json) \
            or len(merged.summary.remove.nested_key) or len(merged.summary.remove.key):
        return None
    try:
        keys = pa.array(up.nested_key[:], pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    ends = np.flatnonzero(pc.equal(keys, "\x00").to_numpy(zero_copy_only=False))
    if len(ends) != len(payloads):
        return None
    enc = keys.dictionary_encode()
    names = enc.dictionary.to_pylist()
    idx = enc.indices.to_numpy(zero_copy_only=False)
    at = np.full(len(names), -1, np.int64)
    at[idx] = np.arange(len(idx))          # repeated indices: the last assignment wins
    values = up.value_json
    out = {}
    for u, pos in enumerate(at.tolist()):
        if pos >= 0 and names[u] != "\x00":
            out[names[u]] = (int(np.searchsorted(ends, pos)), wf.json_value(values[pos].decode("utf-8", "replace")))
    return out
