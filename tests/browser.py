"""A headless Chromium, driven over the DevTools protocol, to check a report as a user's
browser sees it: console errors, network requests, what rendered, how long it took, and a
screenshot. Test tooling, not part of the library: used by the browser tests and
``benches/bench_report.py``; needs ``websockets`` (a dev dependency only)."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"

#: The flags the project's tests run Chromium with: no sandbox (containers), no GPU, and no
#: background traffic of its own, so any network request comes from the page.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")

#: What the page reports once loaded: charts drawn, their marks, and the time to a laid-out page.
PAGE_PROBE = """(() => {
  const charts = [...document.querySelectorAll('svg.chart')];
  document.body.getBoundingClientRect();  // force layout
  const nav = performance.getEntriesByType('navigation')[0];
  return {
    charts: charts.length,
    empty_charts: charts.filter(c => c.querySelectorAll('.mark, polyline').length === 0).length,
    marks: document.querySelectorAll('svg.chart .mark').length,
    figures: [...document.querySelectorAll('figure[data-chart]')].map(f => f.dataset.chart),
    csv_links: document.querySelectorAll('a.csv[href^="data:text/csv"]').length,
    tables: document.querySelectorAll('table').length,
    script_ready: document.documentElement.dataset.ready === '1',
    load_ms: nav ? nav.loadEventEnd - nav.startTime : null,
    now_ms: performance.now(),
    height: document.documentElement.scrollHeight,
  };
})()"""


class Browser:
    """One headless Chromium with a fresh profile; ``with Browser() as b: b.open(path)``."""

    def __init__(self, executable: str = CHROMIUM, width: int = 1280, height: int = 900) -> None:
        self.executable, self.width, self.height = executable, width, height

    def __enter__(self) -> Browser:
        from websockets.sync.client import connect

        self.profile = Path(tempfile.mkdtemp(prefix="coldscope-chromium-"))
        self.proc = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", f"--window-size={self.width},{self.height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.__exit__()
                raise RuntimeError("Chromium did not start its DevTools endpoint")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            pages = [t for t in json.load(resp) if t.get("type") == "page"]
        self._connection = connect(pages[0]["webSocketDebuggerUrl"], max_size=None,
                                   open_timeout=10)
        self.ws = self._connection.__enter__()
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "_connection", None) is not None:
            self._connection.__exit__(None, None, None)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result; events seen meanwhile are kept."""
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("method") == method:
                return msg
            self.events.append(msg)

    def open(self, path: str | Path, offline: bool = True) -> dict[str, Any]:
        """Load a file with the network cut off; returns the page probe plus ``errors``
        (console errors, exceptions, failed loads) and ``requests`` (URLs other than the file
        itself and data: URLs), and ``wall_ms`` from navigation to a laid-out page."""
        if offline:
            self.call("Network.emulateNetworkConditions", offline=True, latency=0,
                      downloadThroughput=-1, uploadThroughput=-1)
        url = Path(path).resolve().as_uri()
        self.events.clear()
        start = time.monotonic()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        probe = self.evaluate(PAGE_PROBE)
        probe["wall_ms"] = (time.monotonic() - start) * 1000
        errors, requests = [], []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                det = p["exceptionDetails"]
                errors.append(f"{det.get('text', 'exception')} "
                              f"{(det.get('exception') or {}).get('description', '')}".strip())
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description")))
                                       for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                errors.append(p["entry"].get("text", ""))
            elif m == "Network.loadingFailed":
                errors.append(f"failed to load: {p.get('errorText')}")
            elif m == "Network.requestWillBeSent":
                req = p["request"]["url"]
                if req != url and not req.startswith("data:"):
                    requests.append(req)
        probe["errors"], probe["requests"] = errors, requests
        return probe

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, out: str | Path, full_page: bool = True) -> Path:
        """A PNG of the page (the whole height when ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            height = self.evaluate("document.documentElement.scrollHeight")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": self.width, "height": height,
                                "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out
