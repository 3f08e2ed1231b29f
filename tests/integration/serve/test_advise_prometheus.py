"""``coldscope serve --advise`` against a real Prometheus (Debian's, as ``make test`` installs).

Prometheus scrapes a tiny HTTP endpoint this test serves, whose counter rises at a known rate
(2.5 requests/s), and serve itself. serve asks Prometheus for the rate (``--rate-query``), ticks
its advisor every second and keeps ``coldscope_desired_replicas`` and
``coldscope_scale_ahead_seconds``; they must equal what ``/v1/scale-hint`` answers for the rate
Prometheus itself returns for the same query, and what the inputs give by hand: 5 stored
start-ups of 40-80 s (p90 76 s), ``ceil(2.5 / 1 req/s) = 3`` replicas. Prometheus, scraping
serve, must see the same gauge (what KEDA's prometheus scaler and prometheus-adapter read), and
the same serve's KEDA external scaler (``--keda-grpc``), called in KEDA's order, must answer
the same number. Under a minute here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from coldscope.core.records import ModelRef, Run
from coldscope.store.db import Store
from tests.conftest import needs
from tests.serve_replay import free_port, stop, wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
RATE = 2.5  # requests/s the counter rises by
TIMES = [40.0, 50.0, 60.0, 70.0, 80.0]  # stored start-ups: p90 = 76 s by linear interpolation
MODEL = "qwen-7b"
QUERY = 'sum(rate(coldscope_test_requests_total{model_name="{model}"}[10s]))'

pytestmark = needs(os.access(PROMETHEUS, os.X_OK),
                   f"no Prometheus binary at {PROMETHEUS} (`make test` installs Debian's "
                   "prometheus package)")


class _Counter:
    """A Prometheus target: ``coldscope_test_requests_total`` = 1000 + RATE x seconds since
    it started (a line, so Prometheus' rate() over it is RATE up to the scrape's jitter)."""

    def __init__(self) -> None:
        started = time.time()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                value = 1000.0 + RATE * (time.time() - started)
                data = ("# TYPE coldscope_test_requests_total counter\n"
                        f'coldscope_test_requests_total{{model_name="{MODEL}"}} {value}\n'
                        ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client, int]]:
    with Store(tmp_path / "store.db") as store:
        for i, ttr in enumerate(TIMES):
            store.add_run(Run(id=f"run{i}", status="ok", cache="cold", time_to_ready_s=ttr,
                              model=ModelRef(path=f"/models/{MODEL}", name=MODEL),
                              started_at=f"2026-01-01T00:00:{i:02d}"))
    counter = _Counter()
    serve_port, prom_port, keda_port = free_port(), free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: traffic\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{counter.port}']}}]\n"
        "  - job_name: coldscope\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{serve_port}']}}]\n")
    prom_log = (tmp_path / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        stdout=prom_log, stderr=subprocess.STDOUT)
    serve_log = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "coldscope.cli.main", "serve", "--port", str(serve_port),
         "--store", str(tmp_path / "store.db"), "--advise", MODEL, "--sla-p99-ttft", "2s",
         "--prometheus", f"http://127.0.0.1:{prom_port}", "--rate-query", QUERY,
         "--advise-interval", "1", "--replica-rps", "1", "--keda-grpc", str(keda_port)],
        stdout=serve_log, stderr=subprocess.STDOUT)
    api = httpx.Client(base_url=f"http://127.0.0.1:{prom_port}", timeout=10)
    client = httpx.Client(base_url=f"http://127.0.0.1:{serve_port}", timeout=10)
    try:
        wait_for(lambda: api.get("/-/ready").status_code == 200, 60, "Prometheus")
        wait_for(lambda: client.get("/healthz").status_code == 200, 60, "coldscope serve")
        yield api, client, keda_port
    finally:
        api.close()
        client.close()
        stop(serve)
        stop(prom)
        counter.server.shutdown()
        serve_log.close()
        prom_log.close()
    text = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in text, text[-3000:]


def _gauges(client: httpx.Client) -> dict[str, float]:
    out = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("coldscope_") and f'{{model="{MODEL}"}} ' in line:
            name, value = line.split(f'{{model="{MODEL}"}} ')
            out[name] = float(value)
    return out


def _prometheus(api: httpx.Client, query: str) -> float | None:
    body = api.get("/api/v1/query", params={"query": query}).json()
    assert body["status"] == "success", body
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_gauges_follow_the_rate_prometheus_measures(
        setup: tuple[httpx.Client, httpx.Client, int]) -> None:
    api, client, keda_port = setup
    query = QUERY.replace("{model}", MODEL)
    wait_for(lambda: abs(_gauges(client).get("coldscope_advise_rate_rps", 0) - RATE) < 0.1,
             60, "serve to tick on the rate Prometheus measures", step=0.5)
    wait_for(lambda: _gauges(client).get("coldscope_desired_replicas") == 3, 20,
             "the gauge at ceil(2.5 / 1)", step=0.5)
    seen = _prometheus(api, query)
    assert seen is not None and seen == pytest.approx(RATE, rel=0.04)
    gauges = _gauges(client)
    hint = client.get("/v1/scale-hint", params={"model": MODEL, "rate": seen,
                                                "sla_p99_ttft": "2s", "replica_rps": 1})
    assert hint.status_code == 200, hint.text
    body = hint.json()
    assert gauges["coldscope_desired_replicas"] == body["desired_replicas"] == 3
    assert gauges["coldscope_scale_ahead_seconds"] == pytest.approx(body["scale_ahead_s"])
    assert body["scale_ahead_s"] == pytest.approx(76.0)
    assert body["source"] == "observed"
    assert gauges.get("coldscope_advise_errors_total", 0.0) <= 3  # only before the 1st scrape
    assert time.time() - gauges["coldscope_advise_last_tick_timestamp_seconds"] < 10
    # what KEDA's prometheus scaler or prometheus-adapter reads, through Prometheus itself
    wait_for(lambda: _prometheus(api, f'coldscope_desired_replicas{{model="{MODEL}"}}') == 3,
             20, "Prometheus to scrape the gauge", step=0.5)
    # KEDA's external scaler of the same serve, called in KEDA's order: the same decision
    import grpc

    from coldscope.integrations import externalscaler_pb2 as pb
    from coldscope.integrations import externalscaler_pb2_grpc as pb_grpc
    with grpc.insecure_channel(f"127.0.0.1:{keda_port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        trigger = pb.ScaledObjectRef(name="qwen", namespace="default",
                                     scalerMetadata={"model": MODEL, "slaP99Ttft": "2s"})
        (metric,) = stub.GetMetricSpec(trigger, timeout=10).metricSpecs
        assert metric.targetSizeFloat == 1.0
        got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=trigger,
                                                   metricName=metric.metricName), timeout=10)
        (value,) = got.metricValues
        assert (value.metricValue, value.metricValueFloat) == (3, 3.0)
        assert stub.IsActive(trigger, timeout=10).result is True
        with pytest.raises(grpc.RpcError) as info:
            stub.IsActive(pb.ScaledObjectRef(name="x", scalerMetadata={"model": "llama"}),
                          timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
