"""What a person sees when they type something wrong (the CLI contract).

A table of bad inputs — every entry of shared/tools/as-a-user's TYPOS list, bad types, negative
numbers, unknown commands, options, runs, keys, rungs and targets, bad SQL, SQL that would
write, missing and malformed CSVs for `ladder --points`, and unusable homes — each run through
marinctl's entry point and checked the way the contract states it: exit 2 for bad input and 1
for a runtime failure, one or two lines on stderr naming the bad input, no traceback, never
"internal error", and for a misspelt command the closest command suggested. A few rows also
run as a real process. The store used for key/run rows holds one SYNTHETIC run.
"""

from __future__ import annotations

import os

import pytest

from tests.blackbox import marinctl_run, sdk_env, stderr_lines, sync_served

RUN = "errors-synthetic"

def case(name, args, code, named, *marks):
    return pytest.param(args, code, named, id=name, marks=list(marks))


CASES = [
    # shared/tools/as-a-user TYPOS, in its order
    case("explain-step-abc", ["explain", "step", "abc"], 2, ["abc"]),
    case("explain-step-negative", ["explain", "step", "-5"], 2, ["-5"]),
    case("explain-alone", ["explain"], 2, ["step"]),
    case("runs-unknown-option", ["runs", "--bogus"], 2, ["--bogus"]),
    case("unknown-command", ["bogus"], 2, ["bogus"]),
    case("misspelt-exprot", ["exprot", "x"], 2, ["exprot", "export"]),
    case("export-without-run", ["export"], 2, ["RUN"]),
    case("plot-without-key", ["plot"], 2, ["KEY"]),
    case("show-unknown-run", ["show", "no-such-run"], 2, ["no-such-run"]),
    case("export-unknown-run", ["export", "no-such-run"], 2, ["no-such-run"]),
    case("ladder-missing-csv", ["ladder", "--points", "missing.csv"], 2, ["missing.csv"]),
    case("repro-unknown-rung", ["repro", "rung9", "--dry-run"], 2, ["rung9"]),
    case("repro-zero-steps", ["repro", "rung1", "--steps", "0"], 2, ["--steps"]),
    case("watch-negative-interval", ["watch", "--interval", "-1"], 2, ["--interval"]),
    case("sql-syntax-error", ["sql", "SELEC 1"], 2, ["SELEC"]),
    case("sql-drop-view", ["sql", "DROP VIEW history"], 2, ["read-only"]),
    case("mix-negative-at", ["mix", "--at", "-3"], 2, ["--at"]),
    case("events-negative-window", ["events", "--window", "-1"], 2, ["--window"]),
    case("home-under-dev-null", ["--home", "/dev/null/x", "runs"], 1, ["/dev/null/x"]),
    case("store-catalog-unreachable", ["--store", "ducklake:postgres:dbname=x host=127.0.0.1 port=1", "runs"], 1,
         ["catalog", "port=1", "cannot be reached"]),
    case("store-init-not-a-url", ["store", "init", "not-a-url"], 2, ["not-a-url", "ducklake:"]),
    case("store-copy-missing-source", ["store", "copy", "no-such.duckdb", "also-missing.duckdb"], 2,
         ["no-such.duckdb"]),
    case("store-conninfo-misspelt", ["--store", "ducklake:postgres:dbname=x hots=127.0.0.1", "runs"], 2, ["hots"]),
    case("explain-range-backwards", ["explain", "--range", "10:5"], 2, ["--range 10:5", "5:10"]),
    # explain --range: what else a person types wrong
    case("explain-range-not-a-span", ["explain", "--range", "10-50"], 2, ["10-50", "A:B"]),
    case("explain-range-every-zero", ["explain", "--range", "5:10", "--every", "0"], 2, ["--every"]),
    case("explain-range-beyond-run", ["explain", "--range", "10:99999", "--run", RUN], 2, ["99999", "10:59"]),
    case("explain-range-unknown-run", ["explain", "--range", "5:10", "--run", "no-such-run"], 2, ["no-such-run"]),
    case("explain-range-with-step", ["explain", "--range", "5:10", "step", "5"], 2, ["--range"]),
    # as-a-user TYPOS of on call: alerts ack, --digest, --preset, the ntfy sink
    case("alerts-ack-no-such-id", ["alerts", "ack", "no-such-id"], 2, ["no-such-id"]),
    case("sync-digest-5x", ["sync", "x/y", "--follow", "--digest", "5x"], 2, ["--digest", "5x"]),
    case("sync-preset-unknown", ["sync", "x/y", "--follow", "--preset", "no-such-preset"], 2, ["no-such-preset"]),
    case("sync-notify-ntfy-not-a-url", ["sync", "x/y", "--follow", "--notify", "ntfy=not a url"], 2, ["ntfy", "URL"]),
    # more misspellings: the closest command is suggested
    case("misspelt-ladr", ["ladr"], 2, ["ladr", "ladder"]),
    case("misspelt-anomalys", ["anomalys"], 2, ["anomalys", "anomalies"]),
    case("misspelt-explian", ["explian", "step", "5"], 2, ["explian", "explain"]),
    case("explain-unknown-subcommand", ["explain", "stpe", "5"], 2, ["stpe", "step"]),
    case("misspelt-option", ["runs", "--jsn"], 2, ["--jsn", "--json"]),
    case("option-without-value", ["ladder", "--pin"], 2, ["--pin"]),
    case("explain-unknown-option-after-step", ["explain", "step", "5", "--bogus"], 2, ["--bogus"]),
    # bad types
    case("explain-step-float", ["explain", "step", "1.5"], 2, ["1.5"]),
    case("ladder-pin-text", ["ladder", "--pin", "abc"], 2, ["abc"]),
    case("ladder-predict-text", ["ladder", "--predict", "lots"], 2, ["lots"]),
    case("events-around-text", ["events", "--around", "abc"], 2, ["abc"]),
    case("watch-interval-text", ["watch", "--interval", "soon"], 2, ["soon"]),
    case("repro-steps-text", ["repro", "rung1", "--steps", "many"], 2, ["many"]),
    case("mix-at-text", ["mix", "--at", "late"], 2, ["late"]),
    # negative numbers
    case("ladder-predict-negative", ["ladder", "--predict", "-1"], 2, ["--predict"]),
    case("repro-steps-negative", ["repro", "rung1", "--steps", "-4"], 2, ["--steps"]),
    case("plot-tiny-width", ["plot", "train/loss", "--run", RUN, "--width", "-3"], 2, ["-3"]),
    case("sync-follow-negative-interval", ["sync", "{wandb_dir}", "--follow", "--interval", "-1"], 2, ["--interval"]),
    # unknown options, arguments, runs, rungs, keys, targets
    case("runs-extra-argument", ["runs", "extra"], 2, ["extra"]),
    case("sql-without-query", ["sql"], 2, ["QUERY"]),
    case("show-unknown-rung", ["show", "rung9"], 2, ["rung9"]),
    case("mix-unknown-rung", ["mix", "--run", "rung7"], 2, ["rung7"]),
    case("anomalies-unknown-run", ["anomalies", "--run", "no-such-run"], 2, ["no-such-run"]),
    case("events-unknown-run", ["events", "--run", "no-such-run"], 2, ["no-such-run"]),
    case("explain-unknown-run", ["explain", "step", "5", "--run", "no-such-run"], 2, ["no-such-run"]),
    case("plot-unknown-run", ["plot", "train/loss", "--run", "no-such-run"], 2, ["no-such-run"]),
    case("export-unknown-key", ["export", RUN, "--keys", "no/such/key"], 2, ["no/such/key"]),
    case("plot-unknown-key", ["plot", "no/such/key", "--run", RUN], 2, ["no/such/key"]),
    case("explain-unknown-metric", ["explain", "step", "5", "--run", RUN, "--metric", "no/such/key"], 2, ["no/such/key"]),
    case("explain-step-beyond-run", ["explain", "step", "999999", "--run", RUN], 2, ["999"]),
    case("export-unknown-format", ["export", RUN, "--format", "xlsx"], 2, ["xlsx"]),
    case("plot-unknown-smoothing", ["plot", "train/loss", "--run", RUN, "--smoothing", "wobble"], 2, ["wobble"]),
    case("sync-unknown-target", ["sync", "not a target!!"], 2, ["not a target!!"]),
    case("sync-malformed-github", ["sync", "github:nope"], 2, ["github:nope"]),
    case("sync-not-a-wandb-url", ["sync", "https://example.com/a/b"], 2, ["example.com"]),
    case("sync-missing-file", ["sync", "./missing.wandb"], 2, ["missing.wandb"]),
    # SQL
    case("sql-unknown-table", ["sql", "SELECT * FROM nope"], 2, ["nope"]),
    case("sql-delete", ["sql", "DELETE FROM runs"], 2, ["read-only"]),
    case("sql-copy-out", ["sql", "COPY (SELECT 1) TO 'out.csv'"], 2, ["read-only"]),
    # ladder --points CSVs
    case("ladder-csv-not-numbers", ["ladder", "--points", "{bad_numbers}"], 2, ["{bad_numbers_name}"]),
    case("ladder-csv-empty", ["ladder", "--points", "{empty}"], 2, ["{empty_name}"]),
    case("ladder-csv-wrong-columns", ["ladder", "--points", "{wrong_columns}"], 2, ["{wrong_columns_name}"]),
    case("ladder-csv-too-few-points", ["ladder", "--points", "{two_points}"], 2, ["{two_points_name}"]),
    case("ladder-csv-is-a-directory", ["ladder", "--points", "{folder}"], 2, ["{folder_name}"]),
    # ladder's intervals and speed-up (shared/tools/as-a-user TYPOS' last two)
    case("ladder-against-missing-csvs", ["ladder", "--points", "missing.csv", "--against", "also-missing.csv"], 2,
         ["missing.csv"]),
    case("ladder-level-above-one", ["ladder", "--level", "1.5"], 2, ["--level", "1.5"]),
    case("ladder-level-zero", ["ladder", "--level", "0"], 2, ["--level"]),
    case("ladder-level-text", ["ladder", "--level", "most"], 2, ["most"]),
    # unusable homes and stores: runtime failures naming the path
    case("home-is-a-file", ["--home", "{a_file}", "runs"], 1, ["{a_file}"]),
    case("home-read-only", ["--home", "{read_only}", "runs"], 1, ["{read_only}"]),
    case("home-read-only-sync", ["--home", "{read_only}", "sync", "{wandb_dir}"], 1, ["{read_only}"]),
    case("db-under-a-file", ["--db", "{a_file}/x.duckdb", "runs"], 1, ["{a_file}"]),
    case("db-is-a-folder", ["--db", "{folder}", "runs"], 1, ["{folder}"]),
    case("db-is-not-a-store", ["--db", "{bad_numbers}", "runs"], 1, ["{bad_numbers}"]),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store holding one SYNTHETIC run, plus the files the table's rows point at."""
    from tests.fakes.synth import marin_run

    base = tmp_path_factory.mktemp("errors")
    home = base / "home"
    run = marin_run(RUN, steps=60, layers=1, experts=2, norm_every=100, eval_every=100)
    done = sync_served([run], f"{run.entity}/{run.project}/{RUN}", env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    files = {
        "bad_numbers": ("compute,loss\n1e20,2.9\nlots,2.5\n3e21,2.4\n"),
        "empty": "",
        "wrong_columns": "flops,value\n1e20,2.9\n1e21,2.6\n1e22,2.4\n",
        "two_points": "compute,loss\n1e20,2.9\n1e21,2.6\n",
    }
    paths = {}
    for name, text in files.items():
        (base / f"{name}.csv").write_text(text)
        paths[name], paths[f"{name}_name"] = str(base / f"{name}.csv"), f"{name}.csv"
    (base / "folder.csv").mkdir()
    paths["folder"], paths["folder_name"] = str(base / "folder.csv"), "folder.csv"
    (base / "plain-file").write_text("not a directory")
    paths["a_file"] = str(base / "plain-file")
    if os.geteuid() == 0:
        paths["read_only"] = "/sys"            # root ignores permission bits; sysfs refuses new files even to root
    else:
        ro = base / "read-only-home"
        ro.mkdir()
        ro.chmod(0o555)
        paths["read_only"] = str(ro)
    wandb_dir = base / "wandb"
    wandb_dir.mkdir()
    paths["wandb_dir"] = str(wandb_dir)
    return {"home": home, "paths": paths}


def _fill(items, paths):
    return [x.format(**paths) if "{" in x else x for x in items]


def check(code, err, want_code, named):
    lines = stderr_lines(err)
    assert "Traceback" not in err and "internal error" not in err.lower(), err
    assert code == want_code, f"exit {code}, want {want_code}: {err}"
    assert 1 <= len(lines) <= 2, f"{len(lines)} stderr lines: {err}"
    assert "try: try" not in err, f"the hint stutters: {err}"
    for word in named:
        assert word.lower() in err.lower(), f"stderr does not name {word!r}: {err}"


@pytest.mark.parametrize("args,code,named", CASES)
def test_bad_input_is_reported_in_one_or_two_lines(cli, world, tmp_path, monkeypatch, args, code, named):
    monkeypatch.chdir(tmp_path)          # relative names (missing.csv, ./missing.wandb) resolve here
    args, named = _fill(args, world["paths"]), _fill(named, world["paths"])
    global_opts = [] if args[0] in ("--home", "--db") else ["--home", str(world["home"])]
    got, _, err = cli(*global_opts, *args)
    check(got, err, code, named)


PROCESS = [c for c in CASES if c.id in ("explain-step-abc", "misspelt-exprot", "sql-syntax-error", "home-is-a-file",
                                         "show-unknown-run")]


@pytest.mark.parametrize("args,code,named", PROCESS)
def test_bad_input_as_a_real_process(world, tmp_path, args, code, named):
    args, named = _fill(args, world["paths"]), _fill(named, world["paths"])
    env = {**sdk_env(), "MARINCTL_HOME": str(world["home"])}
    done = marinctl_run(args, env=env, cwd=tmp_path, timeout=60)
    check(done.returncode, done.stderr, code, named)
    assert done.stdout.strip() == ""     # nothing on stdout for a script to mistake for output


def test_a_store_that_cannot_grow_is_a_runtime_failure_naming_it(tmp_path):
    """A full disk, as a real process meets it: the file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored)
    makes DuckDB's writes fail the way ENOSPC does; the sync stops with exit 1 naming the store."""
    import resource
    import signal
    import subprocess
    import sys

    from tests.blackbox import ROOT, sdk_write

    sdk_write(tmp_path / "runs", '''
run = wandb.init(mode="offline", dir=out, project="full-disk-synthetic", id="full-disk-synthetic", settings=S())
for s in range(3000):
    run.log({f"k{i}": s * 0.5 + i for i in range(20)}, step=s)
run.finish()
''')

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    home = tmp_path / "home"
    done = subprocess.run([sys.executable, "-m", "marinctl", "--home", str(home), "sync", str(tmp_path / "runs" / "wandb")],
                          cwd=ROOT, env=sdk_env(), capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    check(done.returncode, done.stderr, 1, [str(home / "marinctl.duckdb"), "limit"])


def test_marinctl_alone_shows_the_help(cli):
    code, out, err = cli()
    assert code == 0 and err == "" and "Commands:" in out and "marinctl demo" in out


def test_watch_with_an_unknown_target_in_a_terminal(world, tmp_path):
    """In a real terminal (a pty), a TARGET that names nothing fails before the screen opens."""
    import pty
    import subprocess
    import sys

    from tests.blackbox import ROOT

    main, secondary = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "marinctl", "watch", "rung9"], stdin=secondary, stdout=secondary,
                                stderr=subprocess.PIPE, cwd=ROOT, env={**sdk_env(), "MARINCTL_HOME": str(world["home"]),
                                                                       "TERM": "xterm-256color"})
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise AssertionError("watch opened a screen for a target that names nothing")
    finally:
        os.close(main)
        os.close(secondary)
    check(proc.returncode, err.decode(), 2, ["rung9"])
