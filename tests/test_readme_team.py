"""The README's "A team mirror" runs as written, in order (against this session's PostgreSQL).

The runner reads the ```bash block under "### A team mirror" and runs every `marinctl` line
through marinctl's entry point with the block's own variables — `MARINCTL_STORE` pointing at a
fresh database on the test cluster instead of `db.lab`, `MARINCTL_STORE_DATA` at a temporary
folder — after the server lines it stands for (`createuser`, `createdb`: the cluster is made by
the fixture). The laptop's mirror the block copies in is a SYNTHETIC hero lineage written into
an embedded store; `sync … --follow` (the service, tested in tests/test_lake_concurrency.py) is
the one line not run.
"""

from __future__ import annotations

import json
import os
import re
import shlex

from tests.blackbox import ROOT
from tests.blackbox import in_process


def team_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^### A team mirror[^\n]*\n.*?^```bash\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no ```bash block under '### A team mirror'"
    return [line for line in m.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_team_mirror_section_runs_as_written(pg_cluster, tmp_path, monkeypatch):
    from marinctl.store import Store
    from tests.fakes.load import load_into_store
    from tests.fakes.synth import hero_lineage

    lines = team_block()
    exports = {}
    for line in lines:
        if line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            exports[name] = shlex.split(value, comments=True)[0]
    assert "db.lab" in exports["MARINCTL_STORE"] and exports["MARINCTL_STORE_DATA"]
    db = pg_cluster.new_database()
    url = pg_cluster.url(db)
    monkeypatch.setenv("MARINCTL_STORE", url)
    monkeypatch.setenv("MARINCTL_STORE_DATA", str(tmp_path / "shared"))
    laptop = tmp_path / "laptop" / "marinctl.duckdb"
    load_into_store(Store(laptop), hero_lineage(steps_per_segment=200, layers=1, experts=2))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "user" / ".cache" / "marinctl").mkdir(parents=True)
    os.link(laptop, tmp_path / "user" / ".cache" / "marinctl" / "marinctl.duckdb")
    monkeypatch.chdir(tmp_path)
    ran = []
    for line in lines:
        if not line.startswith("marinctl ") or "--follow" in line:
            continue
        argv = [os.path.expanduser(os.path.expandvars(tok)) for tok in shlex.split(line, comments=True)][1:]
        code, out, err = in_process(*argv)
        assert code == 0, f"{line}\n{err}"
        ran.append((argv, out))
    assert [a[:2] for a, _ in ran] == [["store", "init"], ["store", "copy"], ["runs"], ["explain", "step"],
                                       ["store", "copy"], ["store", "maintain"]]
    assert json.loads(ran[1][1])["runs"] == 3 and json.loads(ran[4][1]) == json.loads(ran[1][1])
    assert "hero" in ran[2][1] and (tmp_path / "flight.duckdb").is_file()
