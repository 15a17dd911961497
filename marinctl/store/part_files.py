"""One exported parquet file read as history: which columns are metric keys, and their values.

W&B's export format is only partly documented (wandb/wandb's `core/internal/runhistoryreader/`
and `parquet/downloader.go` read it; how nested values and media appear is not said), so
reading is defensive:
- a metric key is a numeric column (floats; ints, bools and decimals cast to float64);
  strings, lists, maps, binary and media columns are skipped, as the JSON path skips them;
- a struct column is flattened, its numeric fields named with `.` (`train.loss`), the way
  W&B names nested keys; a flat column of the same name wins;
- `_step` statistics choose the row groups a read needs; without statistics every row group
  is read and `_step` filters the rows;
- a null cell means "not logged at this step"; NaN and ±Inf are values.

Files are never rewritten, so each one's footer is parsed once per process (an LRU of open
files: a footer of hundreds of columns is slow to parse) and reads of one file are serialised.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from marinctl.errors import RuntimeFailure

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

STEP = "_step"
MAX_VALUES_PER_READ = 4_000_000   # decoded values per read call (~32 MB of float64)
OPEN_FILES = 32

Column = tuple[str, tuple[str, ...]]   # (top-level column, path of struct fields below it)


def _numeric(t: pa.DataType) -> bool:
    import pyarrow.types as pt
    return pt.is_integer(t) or pt.is_floating(t) or pt.is_boolean(t) or pt.is_decimal(t)


def key_columns(schema: pa.Schema) -> dict[str, Column]:
    """{metric key: where its values are}, for every numeric column and numeric struct field."""
    import pyarrow.types as pt
    out: dict[str, Column] = {}
    nested: dict[str, Column] = {}

    def walk(name: str, t: pa.DataType, top: str, path: tuple[str, ...]) -> None:
        if pt.is_struct(t):
            for i in range(t.num_fields):
                f = t.field(i)
                walk(f"{name}.{f.name}", f.type, top, path + (f.name,))
        elif _numeric(t) and path:
            nested.setdefault(name, (top, path))

    for f in schema:
        if f.name == STEP:
            continue
        if _numeric(f.type):
            out.setdefault(f.name, (f.name, ()))
        elif pt.is_struct(f.type):
            walk(f.name, f.type, f.name, ())
    for name, col in nested.items():
        out.setdefault(name, col)
    return out


@dataclass
class Footer:
    """What the footer alone says: steps held [file_lo, file_hi), rows, the metric keys."""

    file_lo: int
    file_hi: int
    num_rows: int
    keys: dict[str, Column] = field(default_factory=dict)


class PartFile:
    """An open export file: its metadata parsed once, its keys, and reads by step range."""

    def __init__(self, path: Path):
        self.file = open_file(path)
        self.path = Path(path)
        self.lock = threading.Lock()
        schema = self.file.schema_arrow
        if STEP not in schema.names:
            raise ValueError(f"{path.name}: no {STEP} column")
        self.keys = key_columns(schema)
        self._step_index = schema.get_field_index(STEP)
        md = self.file.metadata
        self._groups: list[tuple[int, int | None, int | None]] = []   # (row group, min step, max step)
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(self._step_index).statistics
            if st is not None and st.has_min_max:
                self._groups.append((g, int(st.min), int(st.max)))
            else:
                self._groups.append((g, None, None))

    @property
    def num_rows(self) -> int:
        return self.file.metadata.num_rows

    def footer(self) -> Footer:
        los = [lo for _, lo, _ in self._groups]
        his = [hi for _, _, hi in self._groups]
        if self._groups and all(x is not None for x in los + his):
            lo, hi = min(los), max(his) + 1
        else:   # no statistics: read `_step` itself
            steps = self.file.read(columns=[STEP]).column(0)
            if len(steps) == 0:
                lo = hi = 0
            else:
                import pyarrow.compute as pc   # only for a file without statistics

                mm = pc.min_max(steps)
                lo, hi = int(mm["min"].as_py()), int(mm["max"].as_py()) + 1
        return Footer(lo, hi, self.num_rows, dict(self.keys))

    def groups(self, a: int | None, b: int | None) -> list[int]:
        """Row groups that may hold steps in [a, b)."""
        return [g for g, lo, hi in self._groups
                if lo is None or ((b is None or lo < b) and (a is None or hi >= a))]

    def chunks(self, keys: Sequence[str], a: int | None, b: int | None,
               max_values: int = MAX_VALUES_PER_READ) -> Iterator[tuple[np.ndarray, np.ndarray, list[tuple[str, np.ndarray, np.ndarray]]]]:
        """(steps, in-range mask, [(key, values, logged mask)]) per row group and column group.

        Reads only the row groups that overlap [a, b) and at most `max_values` decoded values
        at a time; keys the file does not hold are skipped.
        """
        wanted = [k for k in keys if k in self.keys]
        if not wanted:
            return
        md = self.file.metadata
        for g in self.groups(a, b):
            rows = max(1, md.row_group(g).num_rows)
            with self.lock:
                steps = self.file.read_row_group(g, columns=[STEP]).column(0)
            keep = np.asarray(steps.is_valid()) if steps.null_count else np.ones(len(steps), bool)
            steps = (steps.fill_null(0) if steps.null_count else steps).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if a is not None:
                keep &= steps >= a
            if b is not None:
                keep &= steps < b
            inside = np.flatnonzero(keep)
            if not len(inside):
                continue
            # only the rows from the first to the last one in range are converted (a window of a
            # few hundred steps out of a 50k-row group: the decode is whole, the rest is not)
            i0, i1 = int(inside[0]), int(inside[-1]) + 1
            steps, keep = steps[i0:i1], keep[i0:i1]
            per = max(1, max_values // rows)
            for i in range(0, len(wanted), per):
                group = wanted[i:i + per]
                tops = list(dict.fromkeys(self.keys[k][0] for k in group))
                with self.lock:
                    table = self.file.read_row_group(g, columns=tops, use_threads=True)
                if i1 - i0 < table.num_rows:
                    table = table.slice(i0, i1 - i0)
                yield steps, keep, [(k, *values(table, self.keys[k])) for k in group]


def open_file(path: Path) -> pq.ParquetFile:
    """A fresh pyarrow handle on a part; a missing file is named with the command that repairs it."""
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(str(path), pre_buffer=False, buffer_size=1 << 20)
    except FileNotFoundError:
        raise RuntimeFailure(f"a stored history part is missing: {path}",
                             "run `marinctl sync` for this run: it fetches the part again") from None


def values(table: pa.Table, col: Column) -> tuple[np.ndarray, np.ndarray]:
    """(float64 values, logged mask) of one key in a table read from a part."""
    import pyarrow as pa
    import pyarrow.types as pt
    top, path = col
    arr = table.column(top)
    arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    valid = _valid(arr) if arr.null_count else None
    for name in path:
        arr = arr.field(name)   # a nested key's leaf (the struct's own nulls are in `valid`)
        if arr.null_count:
            v = _valid(arr)
            valid = v if valid is None else (valid & v)
    if not pt.is_float64(arr.type):
        arr = arr.cast(pa.float64())
    vals = arr.to_numpy(zero_copy_only=False)
    if valid is None:
        valid = np.ones(len(vals), bool)
    return vals, valid


def _valid(arr: pa.Array) -> np.ndarray:
    """An array's validity bitmap as booleans (NumPy: `is_valid()` would import pyarrow.compute,
    a tenth of a second `explain` does not pay)."""
    bits = np.frombuffer(arr.buffers()[0], np.uint8)
    return np.unpackbits(bits, bitorder="little")[arr.offset:arr.offset + len(arr)].astype(bool)


_OPEN: "OrderedDict[str, PartFile]" = OrderedDict()
_OPEN_LOCK = threading.Lock()


def open_part(path: Path) -> PartFile:
    """The process-wide open handle of a part file (file names are never reused)."""
    key = str(path)
    with _OPEN_LOCK:
        found = _OPEN.get(key)
        if found is not None:
            _OPEN.move_to_end(key)
            return found
    opened = PartFile(path)
    with _OPEN_LOCK:
        _OPEN[key] = opened
        while len(_OPEN) > OPEN_FILES:
            _OPEN.popitem(last=False)
    return opened


def forget(path: Path) -> None:
    """Drop a file's cached handle (before deleting it)."""
    with _OPEN_LOCK:
        _OPEN.pop(str(path), None)


def read_footer(path: Path) -> Footer:
    """Step range and metric keys of a downloaded export; ValueError for a file that is not one."""
    import pyarrow as pa
    try:
        return PartFile(path).footer()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{path.name}: not a readable parquet export ({exc})") from None
