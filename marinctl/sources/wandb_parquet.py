"""W&B's parquet history exports: download a run's export and read it back in step chunks.

Exports cover finished history and cost far less than JSON windows. Files are streamed
with pyarrow (`iter_batches`), so memory stays bounded by one chunk, not by the export's
row-group size. Each chunk is a *wide* record batch (`_step` plus one numeric column per
key) for a step range the chunk completely describes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator

from marinctl import paths
from marinctl.domain import RunInfo
from marinctl.sources.wandb import WandbClient

TARGET_VALUES_PER_CHUNK = 200_000
PARQUET_CHUNK_STEPS = 10_000


@dataclass
class Chunk:
    """Steps [lo, hi) of an export, wide: `_step` and the `numeric` columns."""

    lo: int
    hi: int
    wide: object            # pyarrow.RecordBatch
    numeric: list[str]


class Export:
    """A downloaded export, opened file by file in step order; `boundary` is the first step it does not cover."""

    def __init__(self, files: list, boundary: int):
        self.files = files
        self.boundary = boundary

    def chunks(self, start: int) -> Iterator[Chunk]:
        """Chunks covering [start, boundary), in step order."""
        for f in self.files:
            if _step_stat(f, "max") < start or _step_stat(f, "min") >= self.boundary:
                continue
            numeric = [fld.name for fld in f.schema_arrow if fld.name != "_step" and _is_numeric(fld.type)]
            per_step = max(1, len(numeric))
            batch_rows = max(500, min(PARQUET_CHUNK_STEPS, TARGET_VALUES_PER_CHUNK * 10 // per_step))
            for wide in f.iter_batches(batch_size=batch_rows, columns=["_step", *numeric], use_threads=False):
                steps = wide.column(0)
                lo_b, hi_b = int(steps[0].as_py()), int(steps[-1].as_py()) + 1
                if hi_b <= start or lo_b >= self.boundary:
                    continue
                yield Chunk(max(lo_b, start), min(hi_b, self.boundary), wide, numeric)

    def close(self) -> None:
        for f in self.files:
            f.close()


def open_export(client: WandbClient, run: RunInfo, start: int, remote_last: int) -> Export | None:
    """Download the run's export when it covers history from `start` on; None when it does not."""
    import pyarrow.parquet as pq

    ph = client.parquet_history(run.entity, run.project, run.run_id)
    live_steps = [int(r["_step"]) for r in ph.live_rows if "_step" in r]
    if not ph.urls or (live_steps and min(live_steps) <= start):
        return None
    folder = paths.subdir("parquet") / hashlib.sha1(run.uid.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i, url in enumerate(sorted(ph.urls)):
        dest = folder / f"part-{i:04d}.parquet"
        client.download(url, dest)
        files.append(pq.ParquetFile(dest, pre_buffer=False, buffer_size=1 << 20))
    files.sort(key=lambda f: _step_stat(f, "min"))   # partitions in step order (their URL order is not stable)
    exported_max = max((_step_stat(f, "max") for f in files), default=None)
    if exported_max is None:
        for f in files:
            f.close()
        return None
    boundary = min(min(live_steps) if live_steps else exported_max + 1, exported_max + 1, remote_last + 1)
    return Export(files, boundary)


def _step_stat(f, which: str) -> int:
    idx = f.schema_arrow.get_field_index("_step")
    vals = []
    for g in range(f.metadata.num_row_groups):
        st = f.metadata.row_group(g).column(idx).statistics
        if st is None or not st.has_min_max:
            import pyarrow.compute as pc

            col = f.read(columns=["_step"]).column(0)
            return int((pc.min if which == "min" else pc.max)(col).as_py())
        vals.append(st.min if which == "min" else st.max)
    return int(min(vals) if which == "min" else max(vals))


def _is_numeric(t) -> bool:
    import pyarrow.types as pt

    return pt.is_integer(t) or pt.is_floating(t) or pt.is_boolean(t) or pt.is_decimal(t)
