"""marinctl from Python: the local mirror read-only, as DuckDB relations and the CLI's documents.

    import marinctl
    m = marinctl.open()                       # the CLI's data home; or open(home=DIR) / open(db=FILE)
    m.history("hero", keys=["train/loss"]).df()

The tables come back as DuckDB relations (`.df()` pandas, `.pl()` polars, `.arrow()` Arrow,
or more SQL), so marinctl depends on neither pandas nor polars. Each call reads through the
same store functions the CLI's command does, in one short read-only connection, and hands back
a snapshot detached from the file (store/relations.py): a notebook holding results never stops
a `sync --follow` from writing. Runs are named as the CLI names them (`hero`, `rung1`, a run id,
ENTITY/PROJECT/RUN_ID, a W&B URL); failures are the CLI's own `MarinctlError` classes with its
messages. One `Mirror` per thread: its relations share one in-memory connection.
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from marinctl import json_doc, paths
from marinctl.errors import MarinctlError, NoStore, RuntimeFailure, UserError
from marinctl.store import Store, relations
from marinctl.store.engine import duckdb

__all__ = ["Mirror", "open"]

# The contract's `runs --json` fields, then what a notebook filters by (tags, start, link).
RUN_FIELDS = ("run", "uid", "entity", "project", "name", "group", "state", "last_step", "heartbeat_at", "source",
              "fork_parent", "fork_step", "created_at", "tags", "url")
# The contract's `anomalies --json` row (one per episode: `step` its peak), and the detector's evidence.
ANOMALY_FIELDS = ("run", "step", "start", "end", "metric", "kind", "score", "cause_class", "details")
EVENT_FIELDS = ("time", "kind", "title", "url", "run", "step", "source", "author", "event_id", "align", "fields")


def open(home: str | Path | None = None, db: str | Path | None = None, store: str | None = None,  # noqa: A001
         data: str | None = None) -> Mirror:
    """The store under `home` (else `$MARINCTL_HOME`, the checkout's cache/, the user cache dir),
    or the DuckDB file `db`, as the CLI's `--home`/`--db` find it; or the team's DuckLake `store`
    (else `$MARINCTL_STORE` when neither `home` nor `db` is given) with its data at `data` (else
    `$MARINCTL_STORE_DATA`), as `--store`/`--store-data` name it. Read-only."""
    import os

    if store is None and home is None and db is None:
        store = os.environ.get("MARINCTL_STORE") or None
    if store is not None:
        from marinctl.store import lake_store

        if data is None:
            data = os.environ.get("MARINCTL_STORE_DATA") or None
        lake = lake_store(str(store), None if data is None else str(data))
        if not lake.exists():
            raise NoStore(f"no marinctl store in the DuckLake {lake.describe()}",
                          f"create it with `marinctl store init '{store}'`, then sync into it")
        return Mirror(lake)
    path = paths.locate(home, db)
    if not path.is_file():
        raise NoStore(f"no marinctl store at {path}",
                      "mirror runs into it with `marinctl sync marin` (or pass open(home=DIR) / open(db=FILE))")
    try:
        paths.store_file(path)
    except RuntimeFailure as exc:
        raise NoStore(exc.message, exc.hint) from None
    return Mirror(path)


class Mirror:
    """The local mirror, read-only: runs, full-resolution history, detections, events, explain."""

    def __init__(self, where: Path | Any):
        if isinstance(where, (str, Path)):
            self.path: Path | None = Path(where)
            self._store = Store(self.path)
        else:                      # a store object (a DuckLake)
            self.path = None
            self._store = where
        self._mem = relations.memory()

    def __repr__(self) -> str:
        return f"<marinctl.Mirror {self._store.describe()}>"

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the in-memory connection the relations handed out live on (the store file is never held)."""
        self._mem.close()

    # -- reads -------------------------------------------------------------------------------
    def runs(self) -> Any:
        """Every mirrored run: `runs --json`'s fields, plus created_at, tags and url."""
        import pyarrow as pa
        from marinctl.store.runs import list_runs

        with self._read() as con:
            rows = list_runs(con)
        items = [{**r, "run": r["run_id"], "group": r["run_group"]} for r in rows]
        when = pa.timestamp("us", tz="UTC")
        schema = pa.schema([(f, pa.string()) for f in RUN_FIELDS[:7]] + [
            ("last_step", pa.int64()), ("heartbeat_at", when), ("source", pa.string()), ("fork_parent", pa.string()),
            ("fork_step", pa.int64()), ("created_at", when), ("tags", pa.list_(pa.string())), ("url", pa.string())])
        return relations.rows(self._mem, items, schema)

    def history(self, run: str, keys: str | Iterable[str] | None = None, stitched: bool = False,
                wide: bool = False) -> Any:
        """A run's full-resolution history: `export RUN [--keys …] [--stitched]`'s rows (step, key,
        value; by step, then key). `wide=True`: one row per step and a column per key, as W&B's
        `run.history()` gives it (NULL where a step logged no value for a key; NaN stays NaN)."""
        from marinctl.store import metrics
        from marinctl.store.lineage import resolve_target

        wanted = _key_list(keys)
        with self._read() as con:
            target = resolve_target(con, _run_name(run), stitched=bool(stitched))
            if wanted:
                metrics.require_keys(con, wanted)
            long = metrics.export_table(con, target.segments, wanted)
        if not wide:
            return relations.table(self._mem, long)
        columns = wanted or sorted(set(long.column("key").to_pylist()))
        return relations.wide(self._mem, long, columns)

    def anomalies(self, run: str | None = None) -> Any:
        """Detections stored for a run (default: the hero lineage, or the only run), as `anomalies
        --json` lists them, with each detection's evidence as JSON text in `details`."""
        import pyarrow as pa
        from marinctl.analysis.explain.explain import anomalies
        from marinctl.store.lineage import resolve_target

        with self._read() as con:
            found = anomalies(con, resolve_target(con, _run_name(run, optional=True)))
        items = []
        for a in found:
            details = a.get("details") or {}
            items.append({**a, "start": a.get("start", details.get("start", a["step"])),
                          "end": a.get("end", details.get("end", a["step"])),
                          "details": json_doc.dumps(details)})
        schema = pa.schema([("run", pa.string()), ("step", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
                            ("metric", pa.string()), ("kind", pa.string()), ("score", pa.float64()),
                            ("cause_class", pa.string()), ("details", pa.string())])
        return relations.rows(self._mem, items, schema)

    def events(self, run: str | None = None) -> Any:
        """The GitHub timeline (`events [--run RUN] --json`): every stored event, or those aligned
        to a run (`hero`: its whole lineage). Text is as GitHub sent it; `fields` is JSON text."""
        import pyarrow as pa
        from marinctl.analysis.events.timeline import query_events

        with self._read() as con:
            found = query_events(con, _run_name(run, optional=True))
        items = [{**e, "fields": json_doc.dumps(e.get("fields") or {})} for e in found]
        schema = pa.schema([("time", pa.timestamp("us", tz="UTC"))] + [
            (f, pa.int64() if f == "step" else pa.string()) for f in EVENT_FIELDS[1:]])
        return relations.rows(self._mem, items, schema)

    def explain(self, step: int, run: str | None = None, metric: str | None = None) -> dict[str, Any]:
        """`explain step N [--run RUN] [--metric KEY] --json`'s document, as the Python objects a
        reader of that JSON gets (non-finite values spelled "NaN", "Infinity", "-Infinity")."""
        from marinctl.analysis.explain.explain import explain
        from marinctl.store.lineage import resolve_target

        n = _step(step)
        if metric is not None and not isinstance(metric, str):
            raise UserError(f"metric must be a key such as 'train/loss', not {metric!r}",
                            "m.explain(500, metric='params/norm/total')")
        with self._read() as con:
            doc = explain(con, resolve_target(con, _run_name(run, optional=True)), n, metric)
        return json_doc.plain(doc)

    # -- the one way in ----------------------------------------------------------------------
    @contextmanager
    def _read(self) -> Iterator[Any]:
        """A short read-only connection; DuckDB's own failures become the CLI's RuntimeFailure."""
        if self.path is not None and not self.path.is_file():
            raise NoStore(f"the marinctl store {self.path} is gone", "open it again with marinctl.open()")
        try:
            with self._store.connect() as con:
                yield con
        except MarinctlError:
            raise
        except duckdb.Error as exc:
            raise RuntimeFailure(f"cannot read the store {self._store.describe()}: {str(exc).splitlines()[0]}",
                                 "retry in a moment; if it persists, check the file with `marinctl runs`") from None


def _run_name(run: object, optional: bool = False) -> str | None:
    if run is None and optional:
        return None
    if isinstance(run, str) and run.strip():
        return run.strip()
    raise UserError(f"a run is named by a string such as 'hero', 'rung1' or a run id, not {run!r}",
                    "list stored runs with m.runs() or `marinctl runs`")


def _key_list(keys: str | Iterable[str] | None) -> list[str] | None:
    """Keys as given, in order, once each; one string is one key (W&B keys may hold commas)."""
    if keys is None:
        return None
    items = [keys] if isinstance(keys, str) else list(keys)
    if not all(isinstance(k, str) and k for k in items):
        raise UserError(f"keys are metric names such as 'train/loss', not {keys!r}",
                        "m.history('hero', keys=['train/loss', 'optim/learning_rate'])")
    return list(dict.fromkeys(items)) or None


def _step(step: object) -> int:
    try:
        n = operator.index(step)
    except TypeError:
        raise UserError(f"a step is a whole number, not {step!r}", "m.explain(500)") from None
    if n < 0:
        raise UserError(f"step must be 0 or more, not {n}", "m.explain(500)")
    return n
