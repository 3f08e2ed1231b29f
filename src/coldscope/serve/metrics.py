"""Prometheus metrics of observed start-ups.

vLLM exports no per-stage start-up metrics, and autoscalers see at most creation-to-ready. These
metrics give every replica's start-up per stage, so a fleet's dashboards and alerts can ask
"which stage got slower, on which replicas, since which engine version".

Label values come from logs (model names, replica names), so each label has a bound on the
values it keeps: past the bound a new value is reported as ``other``. A fleet of short-lived
pods therefore cannot grow the series count without limit; ``stage`` is always one of
:data:`coldscope.core.stages.BUCKETS`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS

#: Stage durations span from milliseconds (tokenizer) to many minutes (compile of a big model).
STAGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200)
#: Time to ready: seconds (tiny CPU models) to half an hour (large models from cold storage).
STARTUP_BUCKETS = (1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800)
#: Serve's own answers: sub-millisecond (predict) to a second (a plan search).
HTTP_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
OTHER = "other"
UNKNOWN = "unknown"


class BoundedLabel:
    """Keeps at most ``limit`` distinct values of one label; later new values map to
    ``other``. Values are cut to 120 characters."""

    def __init__(self, limit: int):
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        text = UNKNOWN if value is None or value == "" else str(value)[:120]
        with self._lock:
            if text in self._seen:
                return text
            if len(self._seen) < self.limit:
                self._seen.add(text)
                return text
        return OTHER


class _InProgress(Collector):
    """Start-ups recognised but not yet ready, read from the watcher at scrape time (so a
    finished one disappears at once and no stale series is left behind)."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, float]]],
                 replica: BoundedLabel, errors: Callable[[], int]):
        self.source, self.replica, self.errors = source, replica, errors

    def describe(self) -> Iterator[Metric]:
        # without this, registering would call ``collect`` (and the watcher) at once
        yield GaugeMetricFamily("coldscope_startups_in_progress", "")
        yield GaugeMetricFamily("coldscope_startup_in_progress_seconds", "", labels=["replica"])
        yield CounterMetricFamily("coldscope_watch_errors", "")

    def collect(self) -> Iterator[Metric]:
        count = GaugeMetricFamily("coldscope_startups_in_progress",
                                  "Start-ups seen in the watched logs and not yet ready")
        elapsed = GaugeMetricFamily(
            "coldscope_startup_in_progress_seconds",
            "Seconds since the first line of each start-up still in progress",
            labels=["replica"])
        items = list(self.source())
        count.add_metric([], len(items))
        worst: dict[str, float] = {}
        for replica, seconds in items:
            key = self.replica(replica)
            worst[key] = max(seconds, worst.get(key, 0.0))
        for key, seconds in sorted(worst.items()):
            elapsed.add_metric([key], seconds)
        yield count
        yield elapsed
        yield CounterMetricFamily("coldscope_watch_errors",
                                  "Errors the log watcher logged and survived (unreadable or "
                                  "deleted files, a start-up that could not be stored)",
                                  value=self.errors())


class StartupMetrics:
    """The registry ``/metrics`` serves, and ``observe(run)`` to record one finished run."""

    def __init__(self, *, max_models: int = 64, max_replicas: int = 512,
                 max_versions: int = 16, max_findings: int = 64,
                 in_progress: Callable[[], Iterable[tuple[str, float]]] | None = None,
                 errors: Callable[[], int] | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        self.model = BoundedLabel(max_models)
        self.replica = BoundedLabel(max_replicas)
        self.version = BoundedLabel(max_versions)
        self.finding = BoundedLabel(max_findings)
        r = self.registry
        self.stage_seconds = Histogram(
            "coldscope_startup_stage_seconds",
            "Seconds of each start-up stage, per observed start-up (stages the log cannot "
            "show are not observed)",
            ["stage", "model", "engine_version", "replica"], buckets=STAGE_BUCKETS, registry=r)
        self.startup_seconds = Histogram(
            "coldscope_startup_seconds", "Time to ready of each observed start-up",
            ["model", "engine_version", "replica"], buckets=STARTUP_BUCKETS, registry=r)
        self.startups = Counter(
            "coldscope_startups", "Start-ups observed, by outcome (ok or failed)",
            ["model", "status"], registry=r)
        self.findings = Counter(
            "coldscope_startup_findings", "Findings on observed start-ups, by finding id",
            ["id"], registry=r)
        self.predicted = Gauge(
            "coldscope_startup_predicted_seconds",
            "Start-up the loaded startup model predicts for the model (total)",
            ["model"], registry=r)
        self.prediction_error = Gauge(
            "coldscope_startup_prediction_error_seconds",
            "Observed time to ready minus the prediction, for the last start-up of the model",
            ["model"], registry=r)
        self.prediction_abs_error = Histogram(
            "coldscope_startup_prediction_abs_error_seconds",
            "|observed - predicted| time to ready, per observed start-up",
            ["model"], buckets=STAGE_BUCKETS, registry=r)
        self.prediction_inside = Counter(
            "coldscope_startup_prediction_inside_interval",
            "Observed start-ups inside (true) or outside (false) the prediction interval",
            ["model", "inside"], registry=r)
        self.http_seconds = Histogram(
            "coldscope_http_request_seconds",
            "Seconds serve took to answer, by route (from the request's arrival in the app to "
            "its last byte handed to the server; the network and the client not included)",
            ["route"], buckets=HTTP_BUCKETS, registry=r)
        if in_progress is not None:
            r.register(_InProgress(in_progress, self.replica, errors or (lambda: 0)))

    def observe(self, run: Run, replica: str,
                prediction: Mapping[str, Any] | None = None) -> None:
        """Record one finished run."""
        model = self.model(model_name(run))
        version = self.version(run.engine.version)
        rep = self.replica(replica)
        self.startups.labels(model, run.status or UNKNOWN).inc()
        if run.status != "ok":
            return
        for stage in BUCKETS:
            seconds = run.stages.get(stage)
            if seconds is not None:
                self.stage_seconds.labels(stage, model, version, rep).observe(seconds)
        ttr = run.time_to_ready_s
        if ttr is not None:
            self.startup_seconds.labels(model, version, rep).observe(ttr)
        for finding in run.findings:
            self.findings.labels(self.finding(finding.id)).inc()
        if prediction is not None:
            total = float(prediction["total_s"])
            self.predicted.labels(model).set(total)
            if ttr is not None:
                self.prediction_error.labels(model).set(ttr - total)
                self.prediction_abs_error.labels(model).observe(abs(ttr - total))
                low, high = _interval(prediction.get("interval"))
                if low is not None and high is not None:
                    inside = "true" if low <= ttr <= high else "false"
                    self.prediction_inside.labels(model, inside).inc()

    def observe_request(self, route: str, seconds: float) -> None:
        self.http_seconds.labels(route).observe(seconds)

    def set_prediction(self, model_name: str, total_s: float) -> None:
        self.predicted.labels(self.model(model_name)).set(total_s)


def model_path(run: Run) -> str | None:
    """The model directory or id a run names (its record's, else its engine command's)."""
    return run.model.path or run.engine.model


def model_name(run: Run) -> str | None:
    """The name a run's model is labelled by: its recorded name, else the last part of its
    path."""
    if run.model.name:
        return run.model.name
    path = model_path(run)
    return str(path).rstrip("/").rsplit("/", 1)[-1] if path else None


def _interval(value: Any) -> tuple[float | None, float | None]:
    if isinstance(value, Mapping):
        return value.get("low"), value.get("high")
    if isinstance(value, list | tuple) and len(value) == 2:
        return value[0], value[1]
    return None, None
