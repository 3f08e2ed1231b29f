"""``/v1/scale-hint`` from the scale advisor, and ``serve --advise``'s gauges.

Expected values are worked out here from the inputs: start-ups stored with known times (their
type-7 quantiles by hand), a prediction's interval read as the documented log-normal, and
``ceil(rate / replica_rps)`` replicas; the profile's numbers are read from its YAML text.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from coldscope.cli.main import main
from coldscope.core.records import ModelRef, Run
from coldscope.scaling import ScaleAdvisor
from coldscope.serve.advise import Advice, alias_key, match_name
from coldscope.serve.app import create_app
from coldscope.serve.service import ServeConfig, Service
from coldscope.store.db import Store
from tests.conftest import cli_json

SHARED = Path(__file__).resolve().parents[4] / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
PROFILE = yaml.safe_load((Path(__file__).resolve().parents[3] / "src" / "coldscope" /
                          "planning" / "default_profile.yaml").read_text())
TIMES = [40.0, 50.0, 60.0, 70.0, 80.0]  # p50 60, p90 76, p99 79.6 (linear interpolation)


def _store(path: Path, runs: dict[str, list[float]]) -> None:
    with Store(path) as store:
        n = 0
        for name, times in runs.items():
            for ttr in times:
                n += 1
                store.add_run(Run(id=f"run{n}", status="ok", cache="cold", time_to_ready_s=ttr,
                                  model=ModelRef(path=f"/models/{name}", name=name),
                                  started_at=f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}"))


def _service(tmp_path: Path, runs: dict[str, list[float]], startup_model: Path | None = None,
             **config: Any) -> Service:
    _store(tmp_path / "s.db", runs)
    return Service(ServeConfig(store=str(tmp_path / "s.db"),
                               startup_model=str(startup_model) if startup_model else None,
                               model_roots=[str(CONFIGS)] if startup_model else [], **config))


def _hint(client: TestClient, **query: Any) -> Any:
    return client.get("/v1/scale-hint", params={"rate": 3, "sla_p99_ttft": "2s", **query})


def _lognormal(predicted: dict) -> dict[str, float]:
    """The documented reading of a prediction: median = total, the wider side of the interval
    at its level sets the spread."""
    total, low, high = predicted["total_s"], predicted["interval"]["low"], \
        predicted["interval"]["high"]
    sigma = max(math.log(total / low), math.log(high / total)) / \
        NormalDist().inv_cdf(0.5 + predicted["level"] / 2)
    return {f"p{round(q * 100)}": total * math.exp(sigma * NormalDist().inv_cdf(q))
            for q in (0.5, 0.9, 0.99)}


def test_observed_startups_closed_form(tmp_path: Path) -> None:
    client = TestClient(create_app(_service(tmp_path, {"qwen-7b": TIMES})))
    r = _hint(client, model="qwen-7b", replica_rps=0.5)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["desired_replicas"] == 6 == body["warm_replicas"]  # ceil(3 / 0.5)
    assert body["startup_s"] == pytest.approx({"p50": 60.0, "p90": 76.0, "p99": 79.6})
    assert body["scale_ahead_s"] == pytest.approx(76.0)
    assert (body["source"], body["warnings"]) == ("observed", [])
    assert body["matched"] == {"runs": "qwen-7b", "model_dir": None}
    assert body["startup_source"].startswith("stored start-ups of qwen-7b: 5 measured")
    assert body["sla_p99_ttft_s"] == 2.0 and body["replica_rps"] == 0.5
    # the same as a ScaleAdvisor built here from the same runs and the profile's floor numbers
    direct = ScaleAdvisor(target_in_flight=1, service_time_s=2.0, observed_s=TIMES,
                          sla_ttft_s=2.0, keep_alive_s=PROFILE["economics"]["keep_alive_s"],
                          warm_ttft_s=PROFILE["warm_ttft_s"]["high"],
                          burstiness=PROFILE["traffic"]["burstiness"]
                          ).tick(0.0, rate_rps=3.0, running=0, starting=0).to_dict()
    assert {k: body[k] for k in direct if k != "schema_version"} == \
        {k: v for k, v in direct.items() if k != "schema_version"}
    # replica_rps defaults to the profile's (2.0 req/s): ceil(3 / 2)
    assert _hint(client, model="qwen-7b").json()["desired_replicas"] == \
        math.ceil(3 / PROFILE["traffic"]["replica_rps"])
    # at rate 0 a cold path of 76 s breaks a 2 s SLA: the warm floor keeps one replica
    zero = _hint(client, model="qwen-7b", rate=0).json()
    assert (zero["desired_replicas"], zero["warm_floor"], zero["driver"]) == \
        (1, 1, "warm floor")


def test_the_cold_path_before_the_engine_is_added(tmp_path: Path) -> None:
    """A plan's parts before the engine (provisioning, image pull, weight transfer) lengthen
    the cold path the hint scales ahead by: the engine's p90 76 s + 30 + 20 + 4 s = 130 s; the
    engine's own percentiles are unchanged and the cold path's are shifted by 54 s."""
    client = TestClient(create_app(_service(tmp_path, {"qwen-7b": TIMES})))
    engine_only = _hint(client, model="qwen-7b", replica_rps=0.5).json()
    body = _hint(client, model="qwen-7b", replica_rps=0.5, provisioning_s=30,
                 image_pull_s=20, weight_transfer_s=4).json()
    assert body["scale_ahead_s"] == pytest.approx(76.0 + 54.0)
    assert body["startup_s"] == engine_only["startup_s"]
    assert body["cold_path_s"] == pytest.approx({"p50": 114.0, "p90": 130.0, "p99": 133.6})
    assert engine_only["cold_path_s"] == pytest.approx(engine_only["startup_s"])
    r = _hint(client, model="qwen-7b", image_pull_s=-1)
    assert r.status_code == 422 and "image_pull_s" in r.json()["error"]


def test_a_standby_launcher_s_saving_comes_off_the_engine_start_up(tmp_path: Path) -> None:
    """``startup_saving_s``: a launcher on the node takes that many seconds off every engine
    start-up, so the hint scales ahead by less (p90 76 s - 30 s = 46 s); with a new node's
    provisioning it is refused (a new node has no launcher up)."""
    client = TestClient(create_app(_service(tmp_path, {"qwen-7b": TIMES})))
    engine_only = _hint(client, model="qwen-7b", replica_rps=0.5).json()
    body = _hint(client, model="qwen-7b", replica_rps=0.5, startup_saving_s=30).json()
    assert engine_only["scale_ahead_s"] == pytest.approx(76.0)
    assert body["scale_ahead_s"] == pytest.approx(76.0 - 30.0)
    r = _hint(client, model="qwen-7b", startup_saving_s=30, provisioning_s=10)
    assert r.status_code == 422 and "startup_saving_s" in r.json()["error"]


@pytest.mark.parametrize("query, message", [
    ({"replicas_rps": 0.5}, "unknown query parameter 'replicas_rps' (did you mean replica_rps?)"),
    ({"modle": "x"}, "unknown query parameter 'modle' (did you mean model?)"),
    ({"source": "guess"}, "query.source: Input should be 'auto', 'observed' or 'predicted'"),
    ({"rate": -1}, "query.rate: Input should be greater than or equal to 0"),
    ({"rate": "inf"}, "query.rate: Input should be a finite number"),
    ({"replica_rps": 1e-300}, "query.replica_rps: Input should be greater than or equal to "
                              "0.001"),
    ({"sla_p99_ttft": "soon"}, "sla_p99_ttft"),
    ({"sla_p99_ttft": "1e300s"}, "sla_p99_ttft must be 1 ms to 24 h, not '1e300s'"),
    ({"rate": 1e6, "replica_rps": 0.5}, "rate / replica_rps asks for more than 1,000,000 "
                                        "replicas (rate 1e+06 req/s, one replica 0.5 req/s); "
                                        "check both"),
])
def test_bad_queries_are_422_naming_the_mistake(tmp_path: Path, query: dict,
                                                message: str) -> None:
    client = TestClient(create_app(_service(tmp_path, {"qwen-7b": TIMES})))
    r = _hint(client, **{"model": "qwen-7b", **query})
    assert r.status_code == 422, r.text
    assert message in r.json()["error"] and list(r.json()) == ["error"]
    assert "\n" not in r.json()["error"]


def test_unknown_parameter_is_named_before_a_missing_one(tmp_path: Path) -> None:
    client = TestClient(create_app(_service(tmp_path, {"qwen-7b": TIMES})))
    r = client.get("/v1/scale-hint", params={"model": "qwen-7b", "sla_p99_ttft": "2s",
                                             "rte": 3})
    assert r.status_code == 422
    assert r.json()["error"].startswith("unknown query parameter 'rte' (did you mean rate?)")
    r = client.get("/v1/scale-hint?model=qwen-7b&rate=1&rate=2&sla_p99_ttft=2s")
    assert (r.status_code, r.json()) == (422, {
        "error": "query parameter 'rate' is given more than once"})


def test_model_aliases_and_ambiguity(tmp_path: Path) -> None:
    client = TestClient(create_app(_service(
        tmp_path, {"llama2-7b-hf": TIMES, "qwen-7b": [10.0], "qwen_7b": [20.0]})))
    for spelling in ("llama2-7b-hf", "LLAMA2_7B-HF", "Llama2_7b_Hf"):
        body = _hint(client, model=spelling).json()
        assert body["matched"]["runs"] == "llama2-7b-hf" and body["model"] == spelling
        assert body["startup_s"]["p50"] == pytest.approx(60.0)
    assert _hint(client, model="qwen-7b").json()["startup_s"]["p50"] == 10.0  # exact wins
    r = _hint(client, model="QWEN7B")
    assert (r.status_code, r.json()) == (422, {
        "error": "model 'QWEN7B' is ambiguous: it matches the stored models 'qwen-7b', "
                 "'qwen_7b'; give one of them exactly"})
    r = _hint(client, model="nobody-knows")
    assert r.status_code == 404 and r.json()["error"].startswith(
        "no start-up known for model 'nobody-knows'")
    r = _hint(client, model="qwen-7b", source="predicted")
    assert r.status_code == 409 and "--startup-model" in r.json()["error"]
    assert alias_key("Llama-2_7B") == "llama27b"
    assert match_name("a-b", ["A_B", "x"], "names") == "A_B"
    assert match_name("zzz", ["A_B"], "names") is None


def test_source_choice_and_prediction(tmp_path: Path, startup_model: Path) -> None:
    client = TestClient(create_app(_service(tmp_path, {"llama2-7b-hf": TIMES},
                                            startup_model)))
    predicted = cli_json(["predict", str(CONFIGS / "llama-2-7b-hf"), "--startup-model",
                           str(startup_model), "--json"])
    # one name, both sources: the runs of llama2-7b-hf and the directory llama-2-7b-hf
    for spelling in ("llama-2-7b-hf", "llama2-7b-hf"):
        auto = _hint(client, model=spelling).json()
        assert auto["source"] == "observed"  # 5 runs: enough for auto
        assert auto["startup_s"] == pytest.approx({"p50": 60.0, "p90": 76.0, "p99": 79.6})
        pred = _hint(client, model=spelling, source="predicted").json()
        assert pred["source"] == "predicted"
        assert pred["matched"] == {"runs": None, "model_dir": "llama-2-7b-hf"}
        assert pred["startup_s"] == pytest.approx(_lognormal(predicted), rel=1e-9)
        assert pred["warnings"] == predicted["warnings"]
        assert _hint(client, model=spelling, source="observed").json()["source"] == "observed"
    # fewer than 5 runs: auto takes the prediction and says why
    few = TestClient(create_app(_service(tmp_path / "few", {"llama2-7b-hf": TIMES[:2]},
                                         startup_model)))
    body = _hint(few, model="llama-2-7b-hf").json()
    assert body["source"] == "predicted"
    assert body["warnings"][-1] == ("2 observed start-ups (fewer than 5): planned with the "
                                    "prediction")


def test_out_of_domain_warnings_are_carried(tmp_path: Path, startup_model: Path) -> None:
    client = TestClient(create_app(_service(tmp_path, {}, startup_model)))
    predicted = cli_json(["predict", str(CONFIGS / "deepseek-v3"), "--startup-model",
                           str(startup_model), "--json"])
    assert predicted["warnings"]  # 671B parameters, far outside the paper's models
    body = _hint(client, model="deepseek-v3").json()
    assert body["source"] == "predicted" and body["warnings"] == predicted["warnings"]
    assert body["startup_s"]["p50"] == pytest.approx(predicted["total_s"])


def test_params_fallback_is_the_planners_budget(tmp_path: Path) -> None:
    client = TestClient(create_app(_service(tmp_path, {})))
    body = _hint(client, model="m", params="7B").json()
    assert body["source"] == "given"
    assert body["warnings"][0].startswith("no start-up of the model is known: planned with "
                                          "the planner's budget for 7B parameters")


def test_a_second_call_reads_nothing(tmp_path: Path, startup_model: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.planning.infra as infra
    service = _service(tmp_path, {"llama2-7b-hf": TIMES[:2]}, startup_model)
    reads = {"runs": 0, "profile": 0, "isolated": 0}

    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            reads[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(Store, "runs", counted("runs", Store.runs))
    monkeypatch.setattr(infra, "load_profile", counted("profile", infra.load_profile))
    monkeypatch.setattr(service.workers, "isolated",
                        counted("isolated", service.workers.isolated))
    advice = Advice(service)
    client = TestClient(create_app(service, advice))
    first = _hint(client, model="llama-2-7b-hf").json()
    assert first["source"] == "predicted"
    assert reads == {"runs": 1, "profile": 1, "isolated": 1}
    for rate in (0, 1.5, 7):
        assert _hint(client, model="llama-2-7b-hf", rate=rate).status_code == 200
    assert reads == {"runs": 1, "profile": 1, "isolated": 1} and advice.builds == 1
    service._stored += 1  # serve stored a start-up: the observed runs may have changed
    assert _hint(client, model="llama-2-7b-hf").status_code == 200
    assert reads["runs"] == 2 and advice.builds == 2


class _FakePrometheus:
    """``/api/v1/query`` answering ``self.body`` (the real one is in the integration test)."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                from urllib.parse import parse_qs, urlsplit
                outer.queries.append(parse_qs(urlsplit(self.path).query)["query"][0])
                data = json.dumps(outer.body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, *values: float) -> None:
        self.body = {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"i": str(i)}, "value": [time.time(), str(v)]}
            for i, v in enumerate(values)]}}


@pytest.fixture
def prometheus() -> Iterator[_FakePrometheus]:
    fake = _FakePrometheus()
    yield fake
    fake.server.shutdown()


def _gauge(text: str, name: str, model: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{model}"}} '):
            return float(line.split()[-1])
    return None


def test_advise_gauges_equal_the_hint(tmp_path: Path, prometheus: _FakePrometheus) -> None:
    service = _service(tmp_path, {"qwen-7b": TIMES}, advise=["qwen-7b"], sla_p99_ttft="2s",
                       prometheus=prometheus.url, replica_rps=0.5,
                       rate_query='sum(rate(done{m="{model}"}[1m]))')
    advice = Advice(service)
    advice.prepare()
    assert advice.loop is not None
    client = TestClient(create_app(service, advice))
    prometheus.answer(3.0)
    for t in (0.0, 5.0, 10.0):
        advice.loop.tick_all(t)
    assert prometheus.queries[-1] == 'sum(rate(done{m="qwen-7b"}[1m]))'
    text = client.get("/metrics").text
    hint = _hint(client, model="qwen-7b", replica_rps=0.5).json()
    assert _gauge(text, "coldscope_desired_replicas", "qwen-7b") == hint["desired_replicas"] == 6
    assert _gauge(text, "coldscope_scale_ahead_seconds", "qwen-7b") == \
        pytest.approx(hint["scale_ahead_s"]) == 76.0
    assert _gauge(text, "coldscope_advise_rate_rps", "qwen-7b") == 3.0
    decision = advice.decision("QWEN_7B")  # the KEDA scaler's way in: by name, aliases too
    assert decision is not None and decision.desired_replicas == 6
    assert advice.decision("unknown") is None
    assert (advice.models, advice.sla_p99_ttft_s) == (("qwen-7b",), 2.0)  # for the KEDA scaler
    # failures are counted, never raised; the gauges keep their value
    prometheus.answer(1.0, 2.0)
    advice.loop.tick_all(15.0)
    prometheus.body = {"status": "error", "error": "parse error"}
    advice.loop.tick_all(20.0)
    text = client.get("/metrics").text
    assert _gauge(text, "coldscope_advise_errors_total", "qwen-7b") == 2.0
    assert _gauge(text, "coldscope_desired_replicas", "qwen-7b") == 6.0
    # no series: the rate is 0, with a warning; the scale-down delay holds 6 for 60 s
    prometheus.answer()
    advice.loop.tick_all(25.0)
    decision = advice.decision("qwen-7b")
    assert decision is not None and decision.rate_rps == 0.0
    assert decision.warnings[-1] == "the rate query returned no series: rate taken as 0"
    assert decision.desired_replicas == 6 and decision.driver == "scale-down delay"


def test_advise_thread_runs_and_survives_an_unreachable_prometheus(tmp_path: Path) -> None:
    service = _service(tmp_path, {"qwen-7b": TIMES}, advise=["qwen-7b"], sla_p99_ttft="2s",
                       prometheus="http://127.0.0.1:9", advise_interval=0.05)
    advice = Advice(service)
    advice.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and \
                _gauge(service.metrics.render().decode(), "coldscope_advise_errors_total",
                       "qwen-7b") is None:
            time.sleep(0.05)
        assert (_gauge(service.metrics.render().decode(), "coldscope_advise_errors_total",
                       "qwen-7b") or 0) >= 1
        assert advice.decision("qwen-7b") is None
    finally:
        advice.stop()
    assert advice.loop is not None and advice.loop._thread is None


@pytest.mark.parametrize("args, message", [
    (["--advise", "m"], "error: --advise needs --sla-p99-ttft"),
    (["--advise", "m", "--sla-p99-ttft", "2s"], "error: --advise needs --prometheus URL"),
    (["--advise", "m", "--sla-p99-ttft", "soon", "--prometheus", "http://x:9090"],
     "error: --sla-p99-ttft: "),
    (["--advise", "m", "--sla-p99-ttft", "2s", "--prometheus", "ftp://x"],
     "error: --prometheus must be an http(s)://host[:port] URL"),
    (["--sla-p99-ttft", "2s"], "error: --sla-p99-ttft is for --advise MODEL"),
    (["--advise", "nobody", "--sla-p99-ttft", "2s", "--prometheus", "http://127.0.0.1:9",
      "--port", "0"], "error: --advise nobody: no start-up known for model 'nobody'"),
    (["--keda-grpc", "9091"], "error: --keda-grpc answers from the --advise models"),
    (["--advise", "m", "--sla-p99-ttft", "2s", "--prometheus", "http://127.0.0.1:9",
      "--port", "9091", "--keda-grpc", "9091"], "error: --keda-grpc 9091 is also serve's"),
])
def test_bad_advise_flags_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--store", str(tmp_path / "s.db"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_first_calls_at_once_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coldscope.serve.advise import HintKey
    advice = Advice(_service(tmp_path, {"qwen-7b": TIMES}))
    build = Advice._build
    started = threading.Event()

    def slow(self: Advice, key: HintKey) -> Any:
        started.set()
        time.sleep(0.3)  # the others ask while this one builds
        return build(self, key)

    monkeypatch.setattr(Advice, "_build", slow)
    answers: list[dict] = []
    threads = [threading.Thread(target=lambda: answers.append(
        advice.answer(HintKey("qwen-7b", "2s", replica_rps=0.5), 3.0))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert started.is_set() and advice.builds == 1
    assert len(answers) == 8 and {a["desired_replicas"] for a in answers} == {6}


def test_the_documented_keda_metrics_api_trigger_reads_the_gauge(
        tmp_path: Path, prometheus: _FakePrometheus) -> None:
    """docs/autoscale.md's metrics-api ScaledObject: its selector finds serve's gauge, and
    ``targetValue: "1"`` makes the HPA ask for the gauge's replicas."""
    import re

    from prometheus_client.parser import text_string_to_metric_families
    doc = (Path(__file__).resolve().parents[3] / "docs" / "autoscale.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S)
                 if "type: metrics-api" in b)
    (trigger,) = yaml.safe_load(block)["spec"]["triggers"]
    meta = trigger["metadata"]
    assert (meta["format"], meta["targetValue"]) == ("prometheus", "1")
    assert meta["url"].endswith(":8780/metrics")  # serve's default port
    found = re.fullmatch(r'(\w+)\{model="([^"]+)"\}', meta["valueLocation"])
    assert found is not None
    name, model = found.groups()
    service = _service(tmp_path, {model: TIMES}, advise=[model], sla_p99_ttft="2s",
                       prometheus=prometheus.url, replica_rps=0.5)
    advice = Advice(service)
    advice.prepare()
    assert advice.loop is not None
    prometheus.answer(3.0)
    advice.loop.tick_all(0.0)
    text = TestClient(create_app(service, advice)).get("/metrics").text
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == name and s.labels == {"model": model}]
    assert values == [6.0]  # ceil(3 / 0.5): KEDA's AverageValue 1 asks for ceil(6 / 1)
