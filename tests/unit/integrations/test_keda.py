"""The KEDA external scaler served for real on a loopback port, called as KEDA calls it.

A real gRPC server (``serve_keda``) and a real client channel with the generated stub; the
client calls in KEDA's order (``pkg/scalers/external_scaler.go``): ``GetMetricSpec`` once, then
per poll ``GetMetrics`` then ``IsActive``, and reads the values as KEDA does (the float when it
is above 0, else the int). The decisions come from real ``ScaleAdvisor``s ticked with known
rates. Expected replicas come from the closed form ``ceil(rate * T / target_in_flight)``
(advisor.py's step 5), made to hold at every tick by the advisor's parameters (no keep-alive,
no scale-down delay, no season, a forecast level that is the rate now); never from the scaler.
"""

from __future__ import annotations

import math
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from coldscope.scaling import ScaleAdvisor, ScaleDecision, StartupDistribution
from coldscope.util.errors import ColdscopeError
from tests.conftest import REPO, needs
from tests.serve_replay import free_port


def _grpc_available() -> bool:
    try:
        import coldscope.integrations.keda  # noqa: F401
    except Exception:
        return False
    return True


pytestmark = needs(_grpc_available(), "grpcio/protobuf for the KEDA scaler are not installed "
                                      "(pip install 'coldscope[keda]'; `make test` does)")

OBSERVED = [3.0, 3.5, 4.0, 4.5, 5.0]
SERVICE_T = 0.8         # seconds a request spends in a replica
TARGET_IN_FLIGHT = 1.5  # requests one replica should hold
MODEL = "qwen2.5-7b"
OTHER = "llama-3-8b"
TIMEOUT = 10.0          # no call may take longer: a hang fails the test


def expected_replicas(rate: float) -> int:
    """advisor.py step 5: a rate x needs ceil(x T / target_in_flight) replicas."""
    return math.ceil(rate * SERVICE_T / TARGET_IN_FLIGHT)


def advisor(**extra: Any) -> ScaleAdvisor:
    """An advisor whose answer at a tick is the closed form of that tick's rate: alpha 1 makes
    the forecast's level the rate now and beta 1e-9 its trend nil (so the forecast one cold path
    ahead is the rate now); no keep-alive, no scale-down delay, no season."""
    return ScaleAdvisor(target_in_flight=TARGET_IN_FLIGHT, service_time_s=SERVICE_T,
                        startup=StartupDistribution.observed(OBSERVED), alpha=1.0, beta=1e-9,
                        season_s=None, keep_alive_s=0.0, scale_down_delay_s=0.0, **extra)


class AdviseLoop:
    """What ``serve``'s advise loop offers the scaler: the latest decision per model."""

    def __init__(self, **advisors: ScaleAdvisor) -> None:
        self.advisors = advisors
        self.latest: dict[str, ScaleDecision] = {}
        self.lock = threading.Lock()

    def tick(self, model: str, now: float, rate: float) -> ScaleDecision:
        with self.lock:
            decision = self.advisors[model].tick(now, rate_rps=rate, running=0, starting=0)
            self.latest[model] = decision
            return decision

    def decide(self, model: str) -> ScaleDecision | None:
        with self.lock:
            return self.latest.get(model)


@pytest.fixture
def loop() -> AdviseLoop:
    return AdviseLoop(**{MODEL: advisor(), OTHER: advisor()})


@pytest.fixture
def keda(loop: AdviseLoop) -> Iterator[Any]:
    """(stub, pb, address) of a real server over ``loop`` (and a model "boom" that fails)."""
    import grpc

    from coldscope.integrations import externalscaler_pb2 as pb
    from coldscope.integrations import externalscaler_pb2_grpc as pb_grpc
    from coldscope.integrations.keda import provider_from, serve_keda

    advised = provider_from(loop.decide, [MODEL, OTHER, "boom"], sla_p99_ttft_s=2.0)

    def provider(model: str, metadata: Any) -> ScaleDecision:
        if model == "boom":
            raise RuntimeError("the disk\nis on fire")
        return advised(model, metadata)

    port = free_port()
    server = serve_keda(port, provider, host="127.0.0.1", interval_s=0.05, max_workers=5)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ExternalScalerStub(channel), pb, f"127.0.0.1:{port}"
    finally:
        channel.close()
        server.stop(None).wait(TIMEOUT)


def ref(pb: Any, address: str, **metadata: str) -> Any:
    return pb.ScaledObjectRef(name="qwen", namespace="inference",
                              scalerMetadata={"scalerAddress": address, **metadata})


def keda_value(response: Any) -> float:
    """The number KEDA takes from a GetMetricsResponse (external_scaler.go)."""
    (value,) = response.metricValues
    return value.metricValueFloat if value.metricValueFloat > 0 else float(value.metricValue)


def status_of(call: Any) -> tuple[Any, str]:
    import grpc
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_kedas_poll_order_gives_the_closed_form(keda: Any, loop: AdviseLoop) -> None:
    stub, pb, address = keda
    trigger = ref(pb, address, model=MODEL)
    spec = stub.GetMetricSpec(trigger, timeout=TIMEOUT)
    (metric,) = spec.metricSpecs
    assert metric.metricName == "coldscope-desired-replicas-qwen2-5-7b"
    assert (metric.targetSize, metric.targetSizeFloat) == (1, 1.0)
    target = metric.targetSizeFloat if metric.targetSizeFloat > 0 else metric.targetSize
    # rates x T / target: 0, 1.07, 2.67, 5.07, 1.6, 0.53, 0 (none a whole number)
    for i, rate in enumerate([0.0, 2.0, 5.0, 9.5, 3.0, 1.0, 0.0]):
        decision = loop.tick(MODEL, 10.0 * i, rate)
        want = expected_replicas(rate)
        assert decision.desired_replicas == want  # the advisor agrees with the closed form
        got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=trigger,
                                                   metricName=metric.metricName),
                              timeout=TIMEOUT)
        active = stub.IsActive(trigger, timeout=TIMEOUT)
        (value,) = got.metricValues
        assert (value.metricName, value.metricValue, value.metricValueFloat) == \
            (metric.metricName, want, float(want))
        assert math.ceil(keda_value(got) / target) == want  # what the HPA then asks for
        assert active.result is (want > 0)


def test_each_trigger_gets_its_models_decision(keda: Any, loop: AdviseLoop) -> None:
    stub, pb, address = keda
    loop.tick(MODEL, 0.0, 9.5)
    loop.tick(OTHER, 0.0, 2.0)
    for model, rate in ((MODEL, 9.5), (OTHER, 2.0)):
        got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(pb, address, model=model)),
                              timeout=TIMEOUT)
        assert got.metricValues[0].metricValue == expected_replicas(rate)
    # KEDA's FromEnv convention: the environment's value arrives under modelFromEnv
    got = stub.GetMetrics(pb.GetMetricsRequest(
        scaledObjectRef=ref(pb, address, modelFromEnv=OTHER)), timeout=TIMEOUT)
    assert got.metricValues[0].metricValue == expected_replicas(2.0)


def test_stream_is_active_follows_the_decision_and_ends_on_cancel(keda: Any,
                                                                  loop: AdviseLoop) -> None:
    import grpc
    stub, pb, address = keda
    trigger = ref(pb, address, model=MODEL)
    loop.tick(MODEL, 0.0, 0.0)
    stream = stub.StreamIsActive(trigger, timeout=TIMEOUT)
    seen = [next(stream).result]               # the activity at once: 0 replicas
    assert expected_replicas(3.0) == 2
    loop.tick(MODEL, 10.0, 3.0)                # 2 replicas
    seen.append(next(stream).result)
    loop.tick(MODEL, 20.0, 0.0)                # 0 again
    seen.append(next(stream).result)
    assert seen == [False, True, False]
    stream.cancel()
    # max_workers=5 holds one stream: a second opens only once the first has ended
    deadline = time.monotonic() + TIMEOUT
    while True:
        again = stub.StreamIsActive(trigger, timeout=TIMEOUT)
        try:
            assert next(again).result is False
            break
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "the cancelled stream never ended"
            time.sleep(0.05)
    code, message = status_of(lambda: next(stub.StreamIsActive(trigger, timeout=TIMEOUT)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "StreamIsActive" in message
    again.cancel()


def test_missing_model_is_invalid_argument(keda: Any) -> None:
    import grpc
    stub, pb, address = keda
    trigger = ref(pb, address, slaP99Ttft="2s")
    for call in (lambda: stub.GetMetricSpec(trigger, timeout=TIMEOUT),
                 lambda: stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=trigger),
                                         timeout=TIMEOUT),
                 lambda: stub.IsActive(trigger, timeout=TIMEOUT),
                 lambda: next(stub.StreamIsActive(trigger, timeout=TIMEOUT))):
        code, message = status_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "'model'" in message and "inference/qwen" in message and "\n" not in message


def test_misspelt_key_names_the_right_one(keda: Any, loop: AdviseLoop) -> None:
    import grpc
    stub, pb, address = keda
    loop.tick(MODEL, 0.0, 2.0)
    code, message = status_of(lambda: stub.IsActive(
        ref(pb, address, model=MODEL, slaP99TTFT="2s"), timeout=TIMEOUT))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'slaP99TTFT'" in message and "did you mean 'slaP99Ttft'" in message


def test_unknown_model_is_not_found_and_no_decision_yet_unavailable(keda: Any) -> None:
    import grpc
    stub, pb, address = keda
    code, message = status_of(lambda: stub.IsActive(ref(pb, address, model="qwen2.5-7B"),
                                                    timeout=TIMEOUT))
    assert code == grpc.StatusCode.NOT_FOUND
    assert "'qwen2.5-7B'" in message and f"did you mean {MODEL}" in message
    code, message = status_of(lambda: stub.GetMetrics(pb.GetMetricsRequest(
        scaledObjectRef=ref(pb, address, model=MODEL)), timeout=TIMEOUT))
    assert code == grpc.StatusCode.UNAVAILABLE and "no decision" in message
    code, message = status_of(lambda: next(stub.StreamIsActive(ref(pb, address, model=MODEL),
                                                               timeout=TIMEOUT)))
    assert code == grpc.StatusCode.UNAVAILABLE and "no decision" in message


def test_sla_must_be_the_one_serve_plans_with(keda: Any, loop: AdviseLoop) -> None:
    import grpc
    stub, pb, address = keda
    loop.tick(MODEL, 0.0, 2.0)
    assert stub.IsActive(ref(pb, address, model=MODEL, slaP99Ttft="2000ms"),
                         timeout=TIMEOUT).result is True
    for sla, words in (("500ms", "0.5 s"), ("fast", "slaP99Ttft")):
        code, message = status_of(lambda sla=sla: stub.IsActive(
            ref(pb, address, model=MODEL, slaP99Ttft=sla), timeout=TIMEOUT))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and words in message, message


def test_a_failing_provider_is_internal_and_the_server_keeps_answering(
        keda: Any, loop: AdviseLoop, caplog: pytest.LogCaptureFixture) -> None:
    import grpc
    stub, pb, address = keda
    for _ in range(3):
        code, message = status_of(lambda: stub.GetMetrics(pb.GetMetricsRequest(
            scaledObjectRef=ref(pb, address, model="boom")), timeout=TIMEOUT))
        assert code == grpc.StatusCode.INTERNAL
        assert message == "coldscope failed to decide for model 'boom': RuntimeError: the " \
                          "disk is on fire"
    assert "Traceback" in caplog.text and "the disk" in caplog.text
    loop.tick(MODEL, 0.0, 5.0)
    got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(pb, address, model=MODEL)),
                          timeout=TIMEOUT)
    assert got.metricValues[0].metricValue == expected_replicas(5.0)


def test_other_metric_name_and_stream_metric_spec(keda: Any, loop: AdviseLoop) -> None:
    import grpc
    stub, pb, address = keda
    loop.tick(MODEL, 0.0, 2.0)
    code, message = status_of(lambda: stub.GetMetrics(pb.GetMetricsRequest(
        scaledObjectRef=ref(pb, address, model=MODEL), metricName="s0-other"),
        timeout=TIMEOUT))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "'s0-other'" in message
    code, _ = status_of(lambda: next(stub.StreamMetricSpec(ref(pb, address, model=MODEL),
                                                           timeout=TIMEOUT)))
    assert code == grpc.StatusCode.UNIMPLEMENTED


def test_serve_keda_refuses_a_bad_or_busy_port() -> None:
    from coldscope.integrations.keda import ColdscopeExternalScaler, serve_keda

    def provider(model: str, metadata: Any) -> ScaleDecision:
        raise AssertionError("not called")

    for port in (0, 70000, True):
        with pytest.raises(ColdscopeError, match="port must be 1-65535"):
            serve_keda(port, provider, host="127.0.0.1")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ColdscopeError, match=f"cannot serve the KEDA scaler on "
                                                 f"127.0.0.1:{port}"):
            serve_keda(port, provider, host="127.0.0.1")
    with pytest.raises(ColdscopeError, match="interval"):
        ColdscopeExternalScaler(provider, interval_s=0)


def test_stubs_are_generated_from_the_proto_beside_them() -> None:
    """Every message field of KEDA's proto (name, number) is in the generated descriptor, and
    the service has the proto's methods: the stubs are not stale."""
    from coldscope.integrations import externalscaler_pb2 as pb
    text = (REPO / "src/coldscope/integrations/externalscaler.proto").read_text()
    text = re.sub(r"//[^\n]*", "", text)
    assert re.search(r"^package externalscaler;", text, re.M)
    proto: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"message (\w+) \{([^}]*)\}", text):
        proto[name] = {field: int(number) for field, number in
                       re.findall(r"(\w+) = (\d+);", body)}
    generated = {name: {f.name: f.number for f in message.fields}
                 for name, message in pb.DESCRIPTOR.message_types_by_name.items()}
    assert generated == proto
    assert proto["MetricSpec"] == {"metricName": 1, "targetSize": 2, "targetSizeFloat": 3}
    service = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    assert service.full_name == "externalscaler.ExternalScaler"
    assert {m.name for m in service.methods} == set(re.findall(r"rpc (\w+)\(", text))


def test_importing_coldscope_imports_no_grpc() -> None:
    code = ("import sys, coldscope, coldscope.integrations; coldscope.ScaleAdvisor; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_docs_scaledobject_is_what_the_scaler_reads(keda: Any) -> None:
    """docs/autoscale.md's ScaledObject: its trigger metadata keys are the scaler's and KEDA's,
    and that metadata, sent as is, gets the advisor's answer (an advisor with its SLA)."""
    from coldscope.integrations.keda import KEDA_KEYS, METADATA_KEYS, MODEL_KEY
    from coldscope.planning.hint import sla_seconds
    text = (REPO / "docs" / "autoscale.md").read_text()
    start = text.index("## KEDA external scaler")
    opening = text.index("```yaml\n", start) + len("```yaml\n")
    doc = yaml.safe_load(text[opening:text.index("\n```\n", opening)])
    assert (doc["apiVersion"], doc["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    (trigger,) = doc["spec"]["triggers"]
    assert trigger["type"] == "external"
    metadata = trigger["metadata"]
    assert MODEL_KEY in metadata
    assert set(metadata) <= set(METADATA_KEYS) | set(KEDA_KEYS)
    assert set(METADATA_KEYS) <= set(metadata)  # the example shows every key the scaler reads
    assert sla_seconds(metadata["slaP99Ttft"]) == 2.0
    assert all(isinstance(v, str) for v in metadata.values())  # KEDA's metadata is strings

    stub, pb, address = keda
    loop = AdviseLoop(**{metadata["model"]: advisor(sla_ttft_s=2.0)})
    from coldscope.integrations import externalscaler_pb2_grpc as pb_grpc
    from coldscope.integrations.keda import provider_from, serve_keda
    port = free_port()
    server = serve_keda(port, provider_from(loop.decide, [metadata["model"]],
                                            sla_p99_ttft_s=2.0), host="127.0.0.1")
    import grpc
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            doc_stub = pb_grpc.ExternalScalerStub(channel)
            trigger_ref = pb.ScaledObjectRef(name=doc["metadata"]["name"],
                                             namespace=doc["metadata"]["namespace"],
                                             scalerMetadata=metadata)
            loop.tick(metadata["model"], 0.0, 9.5)  # >= 1 replica: the warm floor (<= 1) is moot
            got = doc_stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=trigger_ref),
                                      timeout=TIMEOUT)
            assert got.metricValues[0].metricValue == expected_replicas(9.5)
            assert doc_stub.IsActive(trigger_ref, timeout=TIMEOUT).result is True
    finally:
        server.stop(None).wait(TIMEOUT)


def test_without_grpc_the_import_is_one_line_naming_the_extra() -> None:
    code = ("import sys; sys.modules['grpc'] = None\n"
            "from coldscope.util.errors import ColdscopeError\n"
            "try:\n    import coldscope.integrations.keda\n"
            "except ColdscopeError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    line = done.stdout.strip()
    assert "\n" not in line and "pip install 'coldscope[keda]'" in line and "grpcio" in line
