"""`runs`, `show`, `export`, `sql`: read what the store holds."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from marinctl.cli import complete, output
from marinctl.errors import UserError


def register(app: typer.Typer) -> None:
    app.command("runs", help="List mirrored runs.")(runs)
    app.command("show", help="A run's config, summary and fork lineage. RUN: a W&B run id, ENTITY/PROJECT/RUN_ID, a W&B URL, `hero`, rung1..rung4, or a local run id.")(show)
    app.command("export", help="Full-resolution history as long rows step,key,value (sorted by step, then key).")(export)
    app.command("sql", cls=_SqlCommand, short_help="Read-only SQL over the store (`sql --help` lists every table).")(sql)


class _SqlCommand(TyperCommand):
    """`sql`'s help names every table the store's migrations create, read from them when the help is
    shown (every other command's start would otherwise import the store to build it)."""

    @property
    def help(self) -> str:
        from marinctl.store.schema import tables

        return (f"Read-only SQL over the store (tables: {', '.join(tables())}; view: history, every stored value "
                "as run, uid, step, key, value). A table's columns: `marinctl sql \"DESCRIBE runs\"`.")

    @help.setter
    def help(self, _value: str | None) -> None:
        pass      # the property above is the help


def runs(
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    where: Annotated[Optional[str], typer.Option("--where", metavar="EXPR", help=(
        "Only runs matching EXPR: space-separated terms, all must hold; -term negates. "
        "cfg.optimizer.learning_rate>=1e-3, group~REGEX, state:running, tag:T, name~REGEX, summary.KEY<3.5."))] = None,
    group_by: Annotated[Optional[str], typer.Option("--group-by", metavar="KEY", help=(
        "Count runs per value of KEY (group, state, tag, cfg.KEY, summary.KEY), with the newest run's last values."))] = None,
    keys: Annotated[Optional[str], typer.Option("--keys", metavar="K,…", help="With --group-by: the summary keys to show.")] = None,
) -> None:
    from marinctl.store import open_store
    from marinctl.store.runs import list_runs

    selection = _selection(where)
    with open_store().connect() as con:
        rows = list_runs(con)
    if selection is not None:
        rows = selection.filter(rows)
    if group_by is not None:
        _grouped(rows, group_by, keys, json_out, where)
        return
    items = [{
        "run": r["run_id"], "uid": r["uid"], "entity": r["entity"], "project": r["project"], "name": r["name"],
        "group": r["run_group"], "state": r["state"], "last_step": r["last_step"], "heartbeat_at": r["heartbeat_at"],
        "source": r["source"], "fork_parent": r["fork_parent"], "fork_step": r["fork_step"],
    } for r in rows]
    if json_out:
        output.print_json(items)
        return
    if not items:
        print(f"no stored run matches {where!r} — list them all with `marinctl runs`" if where else
              "no runs stored yet — mirror some with `marinctl sync` (or try `marinctl demo`)")
        return
    output.print_table(
        ["run", "name", "group", "state", "last step", "source", "forked from"],
        [(i["run"], i["name"], i["group"], i["state"], i["last_step"], i["source"],
          f"{i['fork_parent']}@{i['fork_step']}" if i["fork_parent"] else None) for i in items],
    )


def _selection(where: str | None):
    """--where parsed before anything is read (a bad term: exit 2, naming it)."""
    if where is None:
        return None
    from marinctl.run_query import parse

    return parse(where)


def _grouped(rows: list[dict], key: str, keys: str | None, json_out: bool, where: str | None) -> None:
    from marinctl.run_query import group_by
    from marinctl.text import inert

    wanted = [k.strip() for k in keys.split(",") if k.strip()] if keys else None
    groups = group_by(rows, key, wanted)
    if json_out:
        output.print_json(groups)
        return
    if not groups:
        print(f"no stored run matches {where!r}" if where else "no runs stored yet — mirror some with `marinctl sync`")
        return
    last_keys = list(dict.fromkeys(k for g in groups for k in g["last"]))
    output.print_table([inert(key, single_line=True), "runs", "newest run", *last_keys],
                       [(g["group"], g["runs"], g["latest_run"], *[output.fmt(g["last"].get(k)) for k in last_keys])
                        for g in groups])


def show(
    run: Annotated[str, typer.Argument(metavar="RUN", autocompletion=complete.runs)],
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target

    with open_store().connect() as con:
        target = resolve_target(con, run, stitched=True)
    leaf = target.leaf
    doc = {"run": leaf["run_id"], "uid": leaf["uid"], "name": leaf["name"], "state": leaf["state"],
           "group": leaf["run_group"], "source": leaf["source"], "url": leaf["url"],
           "last_step": leaf["last_step"], "config": leaf["config"] or {}, "summary": leaf["summary"] or {},
           "lineage": target.lineage_json()}
    if json_out:
        output.print_json(doc)
        return
    from marinctl.text import inert

    print(f"{inert(leaf['run_id'], single_line=True)}  ({inert(leaf['name'] or '', single_line=True)})")
    print(f"  state {leaf['state'] or '-'} · group {leaf['run_group'] or '-'} · source {leaf['source']} · last step {leaf['last_step']}")
    if leaf["url"]:
        print(f"  {inert(leaf['url'], single_line=True)}")
    print("\nlineage")
    output.print_table(["run", "from step", "to step"], [(x["run"], x["from_step"], x["to_step"]) for x in doc["lineage"]])
    for title, mapping in (("config", doc["config"]), ("summary", doc["summary"])):
        print(f"\n{title}")
        flat = sorted(_flatten(mapping), key=lambda kv: kv[0])   # by key, as W&B lists them
        if not flat:
            print("  (empty)")
        for k, v in flat[:200]:
            print(f"  {inert(k, single_line=True):<48} {output.fmt(v)}")
        if len(flat) > 200:
            print(f"  … {len(flat) - 200} more (use --json)")


def _flatten(obj, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        out.append((prefix, obj))
    return out


def export(
    run: Annotated[str, typer.Argument(metavar="RUN", autocompletion=complete.runs)],
    keys: Annotated[Optional[str], typer.Option("--keys", help="Comma-separated metric keys (default: all).", autocompletion=complete.key_list)] = None,
    fmt: Annotated[str, typer.Option("--format", help="csv or parquet.")] = "csv",
    out: Annotated[Optional[Path], typer.Option("--out", help="Output file (default: stdout for csv).")] = None,
    stitched: Annotated[bool, typer.Option("--stitched", help="Follow the fork lineage: each step from the newest run covering it.")] = False,
) -> None:
    from marinctl.store import metrics, open_store
    from marinctl.store.lineage import resolve_target

    if fmt not in ("csv", "parquet"):
        raise UserError(f"unknown export format {fmt!r}", "use --format csv or --format parquet")
    if fmt == "parquet" and out is None:
        raise UserError("parquet export needs --out PATH", "add --out history.parquet")
    key_list = [k.strip() for k in keys.split(",") if k.strip()] if keys else None
    with open_store().connect() as con:
        target = resolve_target(con, run, stitched=stitched)
        if key_list:
            metrics.require_keys(con, key_list)
        if fmt == "parquet":
            out.parent.mkdir(parents=True, exist_ok=True)
            rows = metrics.export_parquet(con, target.segments, key_list, out)   # streamed: bounded memory
            output.info(f"wrote {rows:,} rows of {target.name} to {out}")
            return
        reader = metrics.export_batches(con, target.segments, key_list, 100_000)
        fh = open(out, "w", newline="") if out else sys.stdout
        rows = 0
        try:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["step", "key", "value"])
            for batch in reader:
                cols = batch.to_pydict()
                writer.writerows(zip(cols["step"], cols["key"], map(output.csv_cell, cols["value"])))
                rows += batch.num_rows
        except BrokenPipeError:
            return
        finally:
            if out:
                fh.close()
        output.info(f"wrote {rows:,} rows of {target.name} to {out or 'stdout'}")


def sql(
    query: Annotated[str, typer.Argument(metavar="QUERY")],
    json_out: Annotated[bool, typer.Option("--json", help="Rows as JSON objects.")] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="Rows as CSV.")] = False,
) -> None:
    from marinctl.store import open_store
    from marinctl.store.sql import query as run_query

    result = run_query(open_store(), query)
    if result is None:
        return
    cols, rows = result
    if json_out:
        output.print_json([dict(zip(cols, r)) for r in rows])
    elif csv_out:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(cols)
        w.writerows([output.csv_cell(v) for v in row] for row in rows)
    else:
        output.print_table(cols, rows)
