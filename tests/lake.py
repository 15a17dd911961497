"""Real components for the team-store tests: a throwaway PostgreSQL cluster and an S3 endpoint.

`PgCluster` runs the distribution's PostgreSQL (`initdb`, `pg_ctl`) on a free loopback port in a
temporary folder; as root the server runs as the `postgres` user, which PostgreSQL requires.
One cluster serves a whole test session (conftest's `pg_cluster`), each test gets a database of
its own. Without PostgreSQL installed the tests FAIL (they do not skip): `.ci/run` installs it.
`S3Server` is moto's S3-compatible server on loopback, with a bucket made for the test.
Everything started here is stopped by pid, also when a test fails.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.blackbox import in_process

_NAMES = itertools.count(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin(name: str) -> str | None:
    """A PostgreSQL program: on PATH, else the distribution's `/usr/lib/postgresql/*/bin`."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(folder, name), os.X_OK):
            return os.path.join(folder, name)
    return None


def pg_version() -> str:
    out = subprocess.run([pg_bin("postgres") or pg_bin("pg_ctl"), "--version"], capture_output=True, text=True)
    return out.stdout.strip()


class PgCluster:
    """A PostgreSQL server of its own, on 127.0.0.1:port, trusting local connections."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="marinctl-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.port = _free_port()
        self.user = "postgres"
        self.pid: int | None = None
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {proc.stderr.strip()[-800:]}")
        return proc

    def start(self) -> "PgCluster":
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("PostgreSQL is not installed (no initdb/pg_ctl): apt-get install postgresql")
        self.sock.mkdir(parents=True)
        if self._as:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
        self._run(initdb, "-D", str(self.data), "-U", self.user, "--auth-local=trust", "--auth-host=trust",
                  "--no-sync", "-E", "UTF8")
        self._run(pg_ctl, "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off"
                        " -c synchronous_commit=off -c full_page_writes=off", "start")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return self

    def psql(self, sql: str, db: str = "postgres") -> str:
        psql = pg_bin("psql")
        return self._run(psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", db,
                         "-v", "ON_ERROR_STOP=1", "-Atc", sql).stdout

    def new_database(self) -> str:
        name = f"lake_{os.getpid()}_{next(_NAMES)}"
        self.psql(f"CREATE DATABASE {name}")
        return name

    def url(self, db: str) -> str:
        return f"ducklake:postgres:dbname={db} host=127.0.0.1 port={self.port} user={self.user}"

    def stop_server(self) -> None:
        """The server stopped (fast: sessions cut), the cluster kept for `restart`."""
        if self.pid is not None:
            self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.pid = None

    def restart(self) -> None:
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        try:
            if self.pid is not None:
                self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            if self.pid is not None:
                try:
                    os.kill(self.pid, 9)
                except OSError:
                    pass
        finally:
            self.pid = None
            shutil.rmtree(self.root, ignore_errors=True)


class S3Server:
    """moto's S3-compatible server on loopback, with `bucket` made; the AWS variables to reach it."""

    def __init__(self, bucket: str = "marinctl-synthetic") -> None:
        from moto.server import ThreadedMotoServer

        self.bucket = bucket
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)

    def start(self) -> "S3Server":
        import logging
        import urllib.request

        logging.getLogger("werkzeug").setLevel(logging.ERROR)     # a line per request otherwise
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        req = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
        urllib.request.urlopen(req, timeout=30).close()
        return self

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "synthetic", "AWS_SECRET_ACCESS_KEY": "synthetic", "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint}

    def keys(self) -> list[str]:
        """The object keys in the bucket (S3's ListObjectsV2, first 1000)."""
        import re
        import urllib.request

        with urllib.request.urlopen(f"{self.endpoint}/{self.bucket}?list-type=2", timeout=30) as resp:
            return re.findall(r"<Key>([^<]+)</Key>", resp.read().decode())

    def stop(self) -> None:
        self._server.stop()


def init_lake(url: str, data) -> None:
    """`store init URL --data DATA`, in this process."""
    code, _, err = in_process("store", "init", url, "--data", str(data))
    assert code == 0, err
