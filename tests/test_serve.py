"""`marinctl serve`: watch in a real browser, behind its door.

The server is the real command (`marinctl serve hero --port 0`) on a SYNTHETIC store; a real
headless Chromium from the distribution's packages, driven through Selenium and the matching
chromedriver, loads the page, reads the rendered terminal (xterm.js's own buffer: the terminal
object is caught as textual.js makes it, the page itself unchanged), presses a key, and closes
the page; the tab's `marinctl watch` process must end with it. Where no Chromium is installed
the browser test skips and says why; under `.ci/run`, which installs one or fails in one line,
it fails instead. The door needs no browser: on a
non-loopback bind every request without the token gets 403, and the websocket opens (101) with
it only (an aiohttp client, as the browser's); on loopback, another site's page and a rebound
host name get 403 too.

`MARINCTL_UPDATE_DOCS=1` also saves the browser's screenshot as docs/serve.png (the README's).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.blackbox import MARINCTL, ROOT, wait_until

CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,900",
                # the page links a web font: nothing leaves this machine, and nothing waits on it
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
# textual.js keeps its xterm.js Terminal in a closure; the first object assigned a `.terminal`
# that is one (it has a buffer and loads addons) is kept on window, and the page works as before
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, 'terminal', {configurable: true, set(v) {
  if (v && v.buffer && v.loadAddon && !window.__marinctlTerminal) window.__marinctlTerminal = v;
  Object.defineProperty(this, 'terminal', {value: v, writable: true, configurable: true, enumerable: true});
}});
"""
READ_SCREEN = """const t = window.__marinctlTerminal; if (!t) return '';
const b = t.buffer.active, out = [];
for (let i = 0; i < t.rows; i++) { const l = b.getLine(b.viewportY + i); out.push(l ? l.translateToString(true) : ''); }
return out.join('\\n');"""
NOWHERE = "http://127.0.0.1:9"      # W&B and GitHub for the served watch: refused at once, never the internet


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from marinctl.store import Store
    from tests.tui_store import build_watch_store

    home = tmp_path_factory.mktemp("serve-home")
    build_watch_store(Store(home / "marinctl.duckdb"))          # SYNTHETIC hero lineage and ladder
    return home


class Served:
    """`marinctl serve ARGS` as a process: its URL (first stdout line), its pid, its children."""

    def __init__(self, home: Path, *args: str):
        env = {**os.environ, "MARINCTL_HOME": str(home), "WANDB_BASE_URL": NOWHERE, "GITHUB_API_URL": NOWHERE,
               "WANDB_MODE": "offline"}
        self.proc = subprocess.Popen([*MARINCTL, "serve", *args, "--port", "0"], env=env, cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line, f"serve printed no URL: {self.proc.stderr.read()[-2000:]}"
        self.title, self.url = re.fullmatch(r"(.+) at (http://\S+)\n", line).groups()
        self.port = int(re.search(r":(\d+)/", self.url).group(1))
        self.base = f"http://127.0.0.1:{self.port}"

    def children(self) -> set[int]:
        """Live (not zombie) processes under the server: its tabs' watch processes and theirs."""
        parents: dict[int, int] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if fields[0] != "Z":
                    parents[int(d.name)] = int(fields[1])
        found, frontier = set(), {self.proc.pid}
        while frontier:
            frontier = {p for p, pp in parents.items() if pp in frontier} - found
            found |= frontier
        return found

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.stderr.read()


def browser(monkeypatch):
    """A headless Chromium from the distribution's packages, or a skip that says what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install -e '.[test]'")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        missing = "no Chromium here: apt-get install -y chromium chromium-driver"
        if os.environ.get("MARINCTL_REQUIRE_CHROMIUM"):         # CI (.ci/run): the browser test runs or fails
            pytest.fail(missing)
        pytest.skip(missing + " (.ci/run installs it, or fails)")
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")      # Selenium Manager, should it be asked, downloads nothing
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in BROWSER_ARGS:
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def open_tab(driver, url: str) -> None:
    """`url` in a new tab that catches its terminal (the script is the tab's own, registered first)."""
    driver.switch_to.new_window("tab")
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CATCH_TERMINAL})
    driver.get(url)


def first_chart_title(screen: str, keys: set[str]) -> str | None:
    """The first chart's title: the first stored metric key on the first row that stands right
    above a chart's top border (None until a chart is painted)."""
    lines = screen.splitlines()
    for above, line in zip(lines, lines[1:]):
        if "┌" in line:
            return next((w for w in re.split(r"[\s│]+", above) if w in keys), None)
    return None


def test_the_watch_in_a_browser_answers_keys_and_ends_with_its_tab(home, tmp_path, monkeypatch):
    import marinctl

    with marinctl.open(home=home) as m:
        keys = {k for (k,) in m.history("hero").project("key").distinct().fetchall()}
    driver = browser(monkeypatch)
    served = Served(home, "hero", "--max-sessions", "1")
    try:
        assert served.title == "marinctl watch hero" and "token" not in served.url       # loopback: no token
        blank = driver.current_window_handle
        open_tab(driver, served.url)
        assert driver.title == "marinctl watch hero"
        def painted() -> bool:
            screen = driver.execute_script(READ_SCREEN)
            return "page 1/" in screen and first_chart_title(screen, keys) is not None

        assert wait_until(painted, timeout=90), driver.execute_script(READ_SCREEN)
        screen = driver.execute_script(READ_SCREEN)
        assert first_chart_title(screen, keys) == "train/loss", screen
        tabs = served.children()
        assert tabs, "no watch process serves the open tab"
        assert httpx.get(served.base + "/").status_code == 503                # --max-sessions 1: the tab holds it

        shot = tmp_path / "serve.png"
        assert driver.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("MARINCTL_UPDATE_DOCS"):
            shutil.copy(shot, ROOT / "docs" / "serve.png")

        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea").send_keys(Keys.PAGE_DOWN)   # next page
        assert wait_until(lambda: "page 2/" in driver.execute_script(READ_SCREEN), timeout=30)
        assert wait_until(lambda: first_chart_title(driver.execute_script(READ_SCREEN), keys) not in (None, "train/loss"),
                          timeout=30), driver.execute_script(READ_SCREEN)

        driver.close()                                                       # close the tab
        driver.switch_to.window(blank)
        assert wait_until(lambda: not (tabs & served.children()), timeout=30), "the tab's watch process outlived it"
        assert httpx.get(served.base + "/").status_code == 200               # its session is free again
    finally:
        driver.quit()
        err = served.stop()
    assert served.proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err


def test_off_loopback_every_request_needs_the_token(home):
    served = Served(home, "rung1", "--host", "0.0.0.0")
    try:
        token = re.search(r"\?token=([\w.~-]+)$", served.url).group(1)
        assert len(token) >= 16 and served.url.startswith(f"http://{socket.gethostname()}:")
        for path in ("/", "/ws", "/download/x"):
            for query in ("", "?token=", "?token=" + token[:-1] + ("x" if token[-1] != "x" else "y")):
                r = httpx.get(served.base + path + query)
                assert r.status_code == 403, (path, query, r.status_code)
                assert "token" in r.text
        page = httpx.get(served.base + "/?token=" + token)
        assert page.status_code == 200 and "<title>marinctl watch rung1</title>" in page.text
        assert page.headers["cache-control"] == "no-store"     # it holds the token; no back/forward cache keeps it
        assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws?token={token}&amp;"' in page.text
        assert httpx.get(served.base + "/static/js/textual.js").status_code == 200   # textual-serve's own files
    finally:
        err = served.stop()
    assert token not in err                                                  # printed once, on stdout


def _handshake(port: int, target: str) -> str:
    """The status line a websocket upgrade of `target` gets (the raw request a browser sends)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall((f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: c3ludGhldGljLWtleS0wMQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
    return head.split(b"\r\n", 1)[0].decode()


@pytest.mark.asyncio
async def test_off_loopback_a_websocket_session_opens_with_the_token_only(home):
    """The browser's websocket, without a browser (aiohttp): on a non-loopback bind the upgrade is
    101 with `?token=` and 403 without it or with a wrong one; a session opened with it runs a watch
    of its own that draws the run, and ends when the socket closes."""
    import asyncio

    import aiohttp

    served = Served(home, "rung1", "--host", "0.0.0.0")
    try:
        token = re.search(r"\?token=([\w.~-]+)$", served.url).group(1)
        for query in ("", "?token=", f"?token={token[:-1]}{'x' if token[-1] != 'x' else 'y'}"):
            assert _handshake(served.port, "/ws" + query).split(" ", 2)[1] == "403", query
        assert not served.children(), "a refused socket started a watch"
        assert _handshake(served.port, f"/ws?token={token}&width=120&height=40").split(" ", 2)[1] == "101"
        assert wait_until(lambda: not served.children(), timeout=30)        # that session closed at once
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(f"ws://127.0.0.1:{served.port}/ws")
            assert refused.value.status == 403
            async with session.ws_connect(f"ws://127.0.0.1:{served.port}/ws?token={token}&width=120&height=40") as ws:
                seen = b""
                while b"rung1" not in seen or b"train/loss" not in seen:    # the tab's watch draws the run
                    message = await asyncio.wait_for(ws.receive(), timeout=90)
                    assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), message
                    seen += message.data if isinstance(message.data, bytes) else message.data.encode()
                tabs = served.children()
                assert tabs, "no watch process serves the session"
        assert wait_until(lambda: not (tabs & served.children()), timeout=30), "the session's watch outlived it"
    finally:
        err = served.stop()
    assert token not in err


def test_on_loopback_other_sites_and_rebound_names_get_403(home):
    served = Served(home)
    try:
        assert served.title == "marinctl watch hero"                        # no TARGET: the hero lineage
        assert httpx.get(served.base + "/").status_code == 200
        assert httpx.get(served.base + "/ws", headers={"Origin": "http://evil.example"}).status_code == 403
        assert httpx.get(served.base + "/", headers={"Host": f"rebound.example:{served.port}"}).status_code == 403
    finally:
        served.stop()


@pytest.mark.parametrize("args, needle", [
    (["no-such-run"], "no-such-run"),
    (["--port", "70000"], "--port"),
    (["--max-sessions", "0"], "--max-sessions"),
    (["--token", "short"], "--token"),
])
def test_bad_input_is_exit_2_before_anything_listens(cli, home, args, needle):
    code, out, err = cli("--home", str(home), "serve", *args)
    assert code == 2 and out == "" and needle in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) <= 2


def test_a_port_in_use_is_exit_1_naming_it(home):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*MARINCTL, "--home", str(home), "serve", "--port", str(port)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and f"127.0.0.1:{port}" in done.stderr and "in use" in done.stderr, done.stderr
