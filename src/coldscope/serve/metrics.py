"""Prometheus metrics of observed start-ups.

vLLM exports no per-stage start-up metrics, and autoscalers see at most creation-to-ready. These
metrics give every replica's start-up per stage, so a fleet's dashboards and alerts can ask
"which stage got slower, on which replicas, since which engine version".

Label values come from logs (model names, replica names), so each label has a bound on the
values it keeps: past the bound a new value is reported as ``other``. A fleet of short-lived
pods therefore cannot grow the series count without limit; ``stage`` is always one of
:data:`coldscope.core.stages.BUCKETS`.

At that bound the two per-replica histograms are most of a scrape: 512 replicas make about
90,000 lines (11 MB), which prometheus_client renders afresh on every scrape, 1.5 s of the
event loop here. They are kept by :class:`LabelledHistogram` instead, which renders a label
set's lines when it is observed (on the storing thread, tens of microseconds) and keeps them, so
``/metrics`` (:meth:`StartupMetrics.render`) costs a join of the text (25 ms for 11 MB here),
whatever the label count and however many start-ups arrive between two scrapes.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

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


#: prometheus_client's own number format (Go's), so the kept lines read as its own do; the
#: function itself has no annotations
_number: Callable[[float], str] = floatToGoString


def _escape(value: str) -> str:
    """A label value as the text format writes it (prometheus_client's escaping)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


@dataclass
class _Series:
    """One label set of a :class:`LabelledHistogram`: counts per bucket (not cumulative), and
    its lines as rendered at the last observation."""

    counts: list[int]
    created: float
    sum: float = 0.0
    text: str = ""
    created_line: str = field(default="")


class LabelledHistogram(Collector):
    """A histogram with labels whose exposition text is kept per label set between scrapes.

    It writes what prometheus_client's ``Histogram`` writes for the same observations (the
    same lines, ``_created`` included; ``tests/unit/serve/test_transport.py`` compares them),
    and as a ``Collector`` it serves any registry; :meth:`text` is the fast path. The lines of
    a label set are rendered when it is observed, not when scraped: start-ups are stored one
    at a time, while a scrape after a burst of them would render thousands of label sets.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float]):
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self.bounds = (*(float(b) for b in buckets), math.inf)
        self._les = [_number(b) for b in self.bounds]
        self._series: dict[tuple[str, ...], _Series] = {}
        self._lock = threading.Lock()
        doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self._head = f"# HELP {name} {doc}\n# TYPE {name} histogram\n"
        self._created_head = f"# HELP {name}_created {doc}\n# TYPE {name}_created gauge\n"

    def observe(self, labels: Sequence[str], value: float) -> None:
        key = tuple(labels)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series([0] * len(self.bounds), time.time())
            series.sum += value
            if value <= math.inf:  # NaN counts in no bucket (as prometheus_client does)
                series.counts[bisect_left(self.bounds, value)] += 1
            self._render(key, series)

    def _render(self, key: tuple[str, ...], series: _Series) -> None:
        # labels sorted by name, ``le`` among them, as prometheus_client writes them
        pairs = sorted(zip(self.labelnames, key, strict=True))
        before = "".join(f'{k}="{_escape(v)}",' for k, v in pairs if k < "le")
        after = "".join(f',{k}="{_escape(v)}"' for k, v in pairs if k > "le")
        plain = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
        lines, total = [], 0
        for le, count in zip(self._les, series.counts, strict=True):
            total += count
            lines.append(f'{self.name}_bucket{{{before}le="{le}"{after}}} '
                         f"{_number(total)}\n")
        lines.append(f"{self.name}_count{{{plain}}} {_number(total)}\n")
        lines.append(f"{self.name}_sum{{{plain}}} {_number(series.sum)}\n")
        series.text = "".join(lines)
        series.created_line = (f"{self.name}_created{{{plain}}} "
                               f"{_number(series.created)}\n")

    def text(self) -> str:
        """The family in the text format, as rendered at each label set's last observation."""
        with self._lock:
            if not self._series:
                return self._head
            parts = [self._head]
            parts.extend(series.text for series in self._series.values())
            parts.append(self._created_head)
            parts.extend(series.created_line for series in self._series.values())
        return "".join(parts)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            series = [(key, list(s.counts), s.sum, s.created) for key, s in self._series.items()]
        for key, counts, total, created in series:
            cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
            family.add_metric(list(key), list(zip(self._les, cumulative, strict=True)), total)
            family.samples.append(Sample(f"{self.name}_created",
                                         dict(zip(self.labelnames, key, strict=True)), created))
        yield family


class _WatcherState(Collector):
    """Start-ups recognised but not yet ready, and the watcher's errors and drops, read from
    the watcher at scrape time (so a finished start-up disappears at once and no stale series
    is left behind)."""

    def __init__(self, source: Callable[[], Iterable[tuple[str, float]]],
                 replica: BoundedLabel, errors: Callable[[], int],
                 dropped: Callable[[], Mapping[str, int]]):
        self.source, self.replica, self.errors, self.dropped = source, replica, errors, dropped

    def describe(self) -> Iterator[Metric]:
        # without this, registering would call ``collect`` (and the watcher) at once
        yield GaugeMetricFamily("coldscope_startups_in_progress", "")
        yield GaugeMetricFamily("coldscope_startup_in_progress_seconds", "", labels=["replica"])
        yield CounterMetricFamily("coldscope_watch_errors", "")
        yield CounterMetricFamily("coldscope_watch_dropped", "", labels=["reason"])

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
        dropped = CounterMetricFamily(
            "coldscope_watch_dropped",
            "What a bound made serve give up, by reason: max_files (a log file never followed), "
            "memory (a start-up's text dropped at --max-watch-bytes), store_queue (a finished "
            "start-up not stored: too many waited)", labels=["reason"])
        for reason, times in sorted(self.dropped().items()):
            dropped.add_metric([reason], times)
        yield dropped


class StartupMetrics:
    """The registry ``/metrics`` serves (:meth:`render`), and ``observe(run)`` to record one
    finished run. ``registry`` holds every metric, for any prometheus_client use."""

    def __init__(self, *, max_models: int = 64, max_replicas: int = 512,
                 max_versions: int = 16, max_findings: int = 64,
                 in_progress: Callable[[], Iterable[tuple[str, float]]] | None = None,
                 errors: Callable[[], int] | None = None,
                 dropped: Callable[[], Mapping[str, int]] | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        self.model = BoundedLabel(max_models)
        self.replica = BoundedLabel(max_replicas)
        self.version = BoundedLabel(max_versions)
        self.finding = BoundedLabel(max_findings)
        self.stage_seconds = LabelledHistogram(
            "coldscope_startup_stage_seconds",
            "Seconds of each start-up stage, per observed start-up (stages the log cannot "
            "show are not observed)",
            ["stage", "model", "engine_version", "replica"], STAGE_BUCKETS)
        self.startup_seconds = LabelledHistogram(
            "coldscope_startup_seconds", "Time to ready of each observed start-up",
            ["model", "engine_version", "replica"], STARTUP_BUCKETS)
        self.startups = Counter(
            "coldscope_startups", "Start-ups observed, by outcome (ok or failed)",
            ["model", "status"], registry=None)
        self.findings = Counter(
            "coldscope_startup_findings", "Findings on observed start-ups, by finding id",
            ["id"], registry=None)
        self.predicted = Gauge(
            "coldscope_startup_predicted_seconds",
            "Start-up the loaded startup model predicts for the model (total)",
            ["model"], registry=None)
        self.prediction_error = Gauge(
            "coldscope_startup_prediction_error_seconds",
            "Observed time to ready minus the prediction, for the last start-up of the model",
            ["model"], registry=None)
        self.prediction_abs_error = Histogram(
            "coldscope_startup_prediction_abs_error_seconds",
            "|observed - predicted| time to ready, per observed start-up",
            ["model"], buckets=STAGE_BUCKETS, registry=None)
        self.prediction_inside = Counter(
            "coldscope_startup_prediction_inside_interval",
            "Observed start-ups inside (true) or outside (false) the prediction interval",
            ["model", "inside"], registry=None)
        self.http_seconds = Histogram(
            "coldscope_http_request_seconds",
            "Seconds serve took to answer, by route (from the request's arrival in the app to "
            "its last byte handed to the server; the network and the client not included)",
            ["route"], buckets=HTTP_BUCKETS, registry=None)
        # serve --advise (serve.advise): one series per advised model (a flag each: bounded)
        self.desired_replicas = Gauge(
            "coldscope_desired_replicas",
            "Replicas (running + starting) the scale advisor asks for now, per --advise model: "
            "KEDA's metrics-api (format: prometheus, targetValue 1) or prometheus-adapter "
            "scales to it", ["model"], registry=None)
        self.scale_ahead_seconds = Gauge(
            "coldscope_scale_ahead_seconds",
            "The cold path (p90, seconds) the advisor scales ahead by, per --advise model",
            ["model"], registry=None)
        self.advise_rate = Gauge(
            "coldscope_advise_rate_rps",
            "The request rate (requests/s) the --rate-query gave at the last tick",
            ["model"], registry=None)
        self.advise_last_tick = Gauge(
            "coldscope_advise_last_tick_timestamp_seconds",
            "Unix time of the last tick that set the advice gauges (a failed query sets none)",
            ["model"], registry=None)
        self.advise_errors = Counter(
            "coldscope_advise_errors",
            "Ticks that failed (Prometheus unreachable, a bad answer), per --advise model",
            ["model"], registry=None)
        # the rest are small (bounded by models, routes and findings): prometheus_client
        # renders them on each scrape, from a registry of their own
        self._rest = CollectorRegistry(auto_describe=True)
        rest: list[Collector] = [self.startups, self.findings, self.predicted,
                                 self.prediction_error, self.prediction_abs_error,
                                 self.prediction_inside, self.http_seconds,
                                 self.desired_replicas, self.scale_ahead_seconds,
                                 self.advise_rate, self.advise_last_tick, self.advise_errors]
        if in_progress is not None:
            rest.append(_WatcherState(in_progress, self.replica, errors or (lambda: 0),
                                      dropped or dict))
        self.registry.register(self.stage_seconds)
        self.registry.register(self.startup_seconds)
        for collector in rest:
            self._rest.register(collector)
            self.registry.register(collector)

    def render(self) -> bytes:
        """What ``/metrics`` serves: ``registry`` in the Prometheus text format."""
        cached = self.stage_seconds.text() + self.startup_seconds.text()
        return generate_latest(self._rest) + cached.encode()

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
                self.stage_seconds.observe((stage, model, version, rep), seconds)
        ttr = run.time_to_ready_s
        if ttr is not None:
            self.startup_seconds.observe((model, version, rep), ttr)
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

    def set_advice(self, model: str, desired_replicas: int, scale_ahead_s: float,
                   rate_rps: float, at: float) -> None:
        """One --advise tick's gauges (``serve.advise.AdviseLoop``)."""
        self.desired_replicas.labels(model).set(desired_replicas)
        self.scale_ahead_seconds.labels(model).set(scale_ahead_s)
        self.advise_rate.labels(model).set(rate_rps)
        self.advise_last_tick.labels(model).set(at)

    def advise_error(self, model: str) -> None:
        self.advise_errors.labels(model).inc()

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
