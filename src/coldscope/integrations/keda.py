"""KEDA external scaler: gRPC ``externalscaler.ExternalScaler`` answering from ``ScaleAdvisor``.

KEDA's ``external`` (polled) and ``external-push`` (streamed) triggers call a gRPC service
defined by KEDA's ``externalscaler.proto`` (kept beside this module, unchanged; the Python
stubs ``externalscaler_pb2*.py`` are generated from it, the command in their header). A
ScaledObject names this server and, in its trigger metadata, the model and the SLA::

    triggers:
      - type: external
        metadata:
          scalerAddress: coldscope.coldscope.svc:9090
          model: qwen2.5-7b
          slaP99Ttft: 2s

KEDA's side of the contract, as read in kedacore/keda ``pkg/scalers/external_scaler.go``:

* every trigger metadata key reaches the scaler in ``ScaledObjectRef.scalerMetadata``
  (KEDA's own ``scalerAddress``, ``enableTLS``, ``unsafeSsl`` included; a ``keyFromEnv`` key
  arrives under that name with the environment's value);
* ``GetMetricSpec`` once per ScaledObject (again when it changes): each ``MetricSpec`` becomes
  an HPA external metric ``s<trigger index>-<metricName>`` whose target is ``targetSizeFloat``
  when it is above 0, else the deprecated ``targetSize``;
* each poll (``pollingInterval``, 30 s by default): ``GetMetrics`` (``metricName`` without the
  ``s<i>-`` prefix; KEDA reads ``metricValueFloat`` when it is above 0, else ``metricValue``),
  then ``IsActive`` (scale from and to zero);
* ``external-push``: ``StreamIsActive`` held open (re-opened after an error, 2 s to 1 min
  back-off) and, on KEDA's main branch, ``StreamMetricSpec``, optional: UNIMPLEMENTED makes KEDA
  fall back to polling ``GetMetricSpec``.

This scaler: one metric per trigger, ``coldscope-desired-replicas-<model>``, with target 1, so
that the HPA (``AverageValue``) asks for ``ceil(value / 1)`` = the desired replicas;
``GetMetrics`` answers the decision's ``desired_replicas`` in both value fields; ``IsActive``
is ``desired_replicas > 0``; ``StreamIsActive`` asks again every ``interval_s`` and sends the
answer when it changes (the first at once), until KEDA cancels; ``StreamMetricSpec`` is
UNIMPLEMENTED (the spec never changes).

The decisions come from a *provider*, ``provider(model, metadata) -> ScaleDecision``: in
``coldscope serve --keda-grpc PORT``, the advise loop's latest decision per model
(:func:`provider_from`). A bad trigger or a failing provider is a gRPC status with a one-line
message, never a crashed server: a missing ``model`` or a bad ``slaP99Ttft`` is
INVALID_ARGUMENT, a model not advised NOT_FOUND, no decision yet UNAVAILABLE (KEDA retries
next poll), any other failure INTERNAL (logged with its traceback). Requires the ``keda`` extra
(``pip install 'coldscope[keda]'``: grpcio and protobuf); importing ``coldscope`` or
``coldscope.integrations`` does not import gRPC.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent import futures
from difflib import get_close_matches
from typing import NoReturn

from coldscope.scaling import ScaleDecision
from coldscope.util.errors import ColdscopeError

try:
    import grpc

    from coldscope.integrations import externalscaler_pb2 as pb
    from coldscope.integrations import externalscaler_pb2_grpc as pb_grpc
except Exception as exc:  # ImportError, protobuf's VersionError, grpc's version RuntimeError
    raise ColdscopeError(
        f"the KEDA external scaler needs grpcio>=1.85.1 and protobuf>=7.35.1,<8 (pip install "
        f"'coldscope[keda]'): {' '.join(str(exc).split())}") from exc

#: The trigger metadata keys this scaler reads (``model`` required).
MODEL_KEY = "model"
SLA_KEY = "slaP99Ttft"
METADATA_KEYS = (MODEL_KEY, SLA_KEY)
#: KEDA's own keys of an ``external``/``external-push`` trigger, passed through to the scaler.
KEDA_KEYS = ("scalerAddress", "enableTLS", "unsafeSsl")
#: The longest model name taken (longer is not a name).
MAX_MODEL_CHARS = 512
#: The metric's name before the model's (sanitised) name.
METRIC_PREFIX = "coldscope-desired-replicas-"
#: The HPA target of that metric: one replica per unit, so the HPA asks for the value itself.
TARGET = 1
#: How often ``StreamIsActive`` asks the provider again, by default (seconds).
DEFAULT_INTERVAL_S = 5.0
#: gRPC worker threads, by default; an open ``StreamIsActive`` holds one.
DEFAULT_MAX_WORKERS = 16
#: Worker threads kept for the polls: streams beyond ``max_workers - RESERVED_WORKERS`` are
#: refused (RESOURCE_EXHAUSTED), so that open streams never starve ``GetMetrics``.
RESERVED_WORKERS = 4

#: The decision a trigger's model gets: ``provider(model, scalerMetadata) -> ScaleDecision``.
Provider = Callable[[str, Mapping[str, str]], ScaleDecision]

logger = logging.getLogger(__name__)


class ModelNotAdvised(ColdscopeError):
    """The trigger's model is not one this server advises on (gRPC NOT_FOUND)."""


class NoDecisionYet(ColdscopeError):
    """The model is advised on but has no decision yet (gRPC UNAVAILABLE: KEDA asks again)."""


class ColdscopeExternalScaler(pb_grpc.ExternalScalerServicer):
    """KEDA's ``ExternalScaler`` service over a provider of decisions (module doc).

    ``provider(model, metadata)``: the decision for the trigger's ``model``, given the whole
    trigger metadata (so that it can read ``slaP99Ttft``). It is called from gRPC's worker
    threads, possibly at once: it must be thread-safe (reading the latest decision an advise
    loop made is). ``interval_s``: how often ``StreamIsActive`` asks it again.
    ``max_streams``: ``StreamIsActive`` calls open at once, beyond which one is refused.
    """

    def __init__(self, provider: Provider, *, interval_s: float = DEFAULT_INTERVAL_S,
                 max_streams: int = DEFAULT_MAX_WORKERS - RESERVED_WORKERS) -> None:
        if not callable(provider):
            raise ColdscopeError(f"the KEDA scaler's provider must be callable, not "
                                 f"{provider!r:.60}")
        if isinstance(interval_s, bool) or not isinstance(interval_s, int | float) or \
                not math.isfinite(interval_s) or not 0 < interval_s <= 3600:
            raise ColdscopeError(f"the KEDA scaler's interval must be a number of seconds "
                                 f"above 0 and at most 3600, not {interval_s!r}")
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise ColdscopeError(f"max_streams must be a whole number >= 1, not "
                                 f"{max_streams!r}")
        self.provider = provider
        self.interval_s = float(interval_s)
        self.max_streams = max_streams
        self._streams = threading.BoundedSemaphore(max_streams)

    def GetMetricSpec(self, request: pb.ScaledObjectRef,
                      context: grpc.ServicerContext) -> pb.GetMetricSpecResponse:
        model, _ = _trigger(request, context)
        return pb.GetMetricSpecResponse(metricSpecs=[pb.MetricSpec(
            metricName=metric_name(model), targetSize=TARGET, targetSizeFloat=float(TARGET))])

    def GetMetrics(self, request: pb.GetMetricsRequest,
                   context: grpc.ServicerContext) -> pb.GetMetricsResponse:
        model, metadata = _trigger(request.scaledObjectRef, context)
        name = metric_name(model)
        if request.metricName and request.metricName != name:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                   f"metric {request.metricName!r} is not this trigger's: model {model!r} has "
                   f"{name!r} (from GetMetricSpec)")
        desired = self._desired(model, metadata, context)
        return pb.GetMetricsResponse(metricValues=[pb.MetricValue(
            metricName=name, metricValue=desired, metricValueFloat=float(desired))])

    def IsActive(self, request: pb.ScaledObjectRef,
                 context: grpc.ServicerContext) -> pb.IsActiveResponse:
        model, metadata = _trigger(request, context)
        return pb.IsActiveResponse(result=self._desired(model, metadata, context) > 0)

    def StreamIsActive(self, request: pb.ScaledObjectRef,
                       context: grpc.ServicerContext) -> Iterator[pb.IsActiveResponse]:
        model, metadata = _trigger(request, context)
        if not self._streams.acquire(blocking=False):
            _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                   f"{self.max_streams} StreamIsActive calls are open already, the most this "
                   f"server holds: use a polled 'external' trigger for more ScaledObjects")
        try:
            ended = threading.Event()  # set when KEDA cancels or the server stops
            context.add_callback(ended.set)
            last: bool | None = None
            while context.is_active():
                active = self._desired(model, metadata, context) > 0
                if active != last:
                    last = active
                    yield pb.IsActiveResponse(result=active)
                if ended.wait(self.interval_s):
                    break
        finally:
            self._streams.release()

    def StreamMetricSpec(self, request: pb.ScaledObjectRef,
                         context: grpc.ServicerContext) -> Iterator[pb.GetMetricSpecResponse]:
        # KEDA (main branch) stops asking on UNIMPLEMENTED and polls GetMetricSpec: the spec
        # (one metric, target 1) never changes, so there is nothing to push.
        _abort(context, grpc.StatusCode.UNIMPLEMENTED,
               "StreamMetricSpec is not implemented: the metric spec never changes; KEDA polls "
               "GetMetricSpec")
        yield pb.GetMetricSpecResponse()  # never reached: makes this a generator, as gRPC wants

    def _desired(self, model: str, metadata: Mapping[str, str],
                 context: grpc.ServicerContext) -> int:
        """The provider's ``desired_replicas``; its failure becomes the call's status."""
        try:
            decision = self.provider(model, metadata)
            desired = decision.desired_replicas
            if isinstance(desired, bool) or not isinstance(desired, int) or desired < 0:
                raise TypeError(f"the provider answered {decision!r:.80}, not a ScaleDecision "
                                f"with whole desired_replicas >= 0")
            return desired
        except ModelNotAdvised as exc:
            _abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
        except NoDecisionYet as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except ColdscopeError as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:
            logger.exception("coldscope KEDA scaler: the decision for model %r failed", model)
            _abort(context, grpc.StatusCode.INTERNAL,
                   f"coldscope failed to decide for model {model!r}: {type(exc).__name__}: "
                   f"{exc}")


def serve_keda(port: int, provider: Provider, *, host: str = "0.0.0.0",
               interval_s: float = DEFAULT_INTERVAL_S,
               max_workers: int = DEFAULT_MAX_WORKERS) -> grpc.Server:
    """Start a gRPC server of :class:`ColdscopeExternalScaler` on ``host:port`` (plaintext,
    as KEDA's ``external`` trigger without ``enableTLS`` expects) and return it, started.

    ``max_workers`` threads answer calls; ``max_workers - RESERVED_WORKERS`` of them at most
    hold ``StreamIsActive`` streams. Stop it with ``server.stop(grace_s)``, which also ends
    the open streams. A port that cannot be bound is a one-line ``ColdscopeError``.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ColdscopeError(f"the KEDA gRPC port must be 1-65535, not {port!r}")
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or \
            max_workers <= RESERVED_WORKERS:
        raise ColdscopeError(f"max_workers must be a whole number above {RESERVED_WORKERS}, "
                             f"not {max_workers!r}")
    scaler = ColdscopeExternalScaler(provider, interval_s=interval_s,
                                     max_streams=max_workers - RESERVED_WORKERS)
    # Calls beyond the workers wait in a bounded queue, then are refused (RESOURCE_EXHAUSTED).
    # No SO_REUSEPORT (gRPC's default): a second server on a port in use must fail, not share
    # KEDA's calls with the first.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="coldscope-keda"),
                         options=[("grpc.so_reuseport", 0)],
                         maximum_concurrent_rpcs=4 * max_workers)
    pb_grpc.add_ExternalScalerServicer_to_server(scaler, server)
    address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else \
        f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        bound, why = 0, " ".join(str(exc).split())
    else:
        why = "bind failed"
    if not bound:
        server.stop(None)
        raise ColdscopeError(f"cannot serve the KEDA scaler on {address}: {why} (is the port "
                             f"in use?)")
    server.start()
    logger.info("coldscope KEDA external scaler on %s", address)
    return server


def provider_from(decide: Callable[[str], ScaleDecision | None], models: Iterable[str], *,
                  sla_p99_ttft_s: float | None = None) -> Provider:
    """A provider over an advise loop: ``decide(model)`` is its latest decision (None: none
    yet), ``models`` the models it advises on, ``sla_p99_ttft_s`` the SLA it plans with.

    A trigger's model outside ``models`` is :class:`ModelNotAdvised` (NOT_FOUND), one with no
    decision yet :class:`NoDecisionYet` (UNAVAILABLE). A trigger's ``slaP99Ttft`` (``2s``,
    ``500ms``, seconds) must be the SLA the loop plans with: a different one, or one given to a
    loop without an SLA, is INVALID_ARGUMENT, as this server cannot plan for another.
    """
    advised = frozenset(models)
    if not advised:
        raise ColdscopeError("the KEDA scaler needs at least one model to advise on")
    if sla_p99_ttft_s is not None and (
            isinstance(sla_p99_ttft_s, bool) or not isinstance(sla_p99_ttft_s, int | float)
            or not math.isfinite(sla_p99_ttft_s) or sla_p99_ttft_s <= 0):
        raise ColdscopeError(f"sla_p99_ttft_s must be seconds above 0, not {sla_p99_ttft_s!r}")
    names = ", ".join(sorted(advised))

    def provider(model: str, metadata: Mapping[str, str]) -> ScaleDecision:
        if model not in advised:
            near = get_close_matches(model, sorted(advised), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ModelNotAdvised(f"model {model!r} is not advised here{hint}; this server "
                                  f"advises on {names}")
        asked = _value(metadata, SLA_KEY)
        if asked is not None:
            from coldscope.planning.hint import sla_seconds
            try:
                sla = sla_seconds(asked)
            except ColdscopeError as exc:
                raise ColdscopeError(f"trigger metadata {SLA_KEY}: {exc}") from None
            if sla_p99_ttft_s is None:
                raise ColdscopeError(f"trigger metadata {SLA_KEY} is {asked!r}, but this "
                                     f"server plans without an SLA: start it with "
                                     f"--sla-p99-ttft {asked}, or drop {SLA_KEY}")
            if not math.isclose(sla, sla_p99_ttft_s, rel_tol=1e-9):
                raise ColdscopeError(f"trigger metadata {SLA_KEY} is {asked!r} ({sla:g} s), "
                                     f"but this server plans with {sla_p99_ttft_s:g} s: make "
                                     f"them the same")
        decision = decide(model)
        if decision is None:
            raise NoDecisionYet(f"no decision for model {model!r} yet (the advise loop has "
                                f"not ticked it): KEDA asks again at its next poll")
        return decision

    return provider


def metric_name(model: str) -> str:
    """``coldscope-desired-replicas-<model>``, the model's name lower-cased with every run of
    characters outside ``a-z0-9`` as one ``-`` (a valid Kubernetes metric name)."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:200] or "model"
    return METRIC_PREFIX + slug


def _trigger(ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> tuple[str,
                                                                                dict[str, str]]:
    """The trigger's model and its whole metadata; a missing model or a misspelt key of ours
    ends the call with INVALID_ARGUMENT."""
    metadata = dict(ref.scalerMetadata)
    where = f"ScaledObject {ref.namespace}/{ref.name}" if ref.name else "the trigger"
    ours = {key.lower(): key for key in METADATA_KEYS}
    ours.update({f"{key.lower()}fromenv": f"{key}FromEnv" for key in METADATA_KEYS})
    for key in metadata:
        if key in METADATA_KEYS or key in KEDA_KEYS or key in ours.values():
            continue
        plain = re.sub(r"[^a-z0-9]", "", key.lower())
        near = get_close_matches(plain, list(ours), n=1, cutoff=0.8)
        if near:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                   f"{where}: trigger metadata has {key!r}; did you mean {ours[near[0]]!r}? "
                   f"coldscope reads {', '.join(METADATA_KEYS)}")
    model = _value(metadata, MODEL_KEY)
    if model is None:
        _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
               f"{where}: trigger metadata needs {MODEL_KEY!r} (the model to scale; "
               f"optional: {SLA_KEY!r})")
    if len(model) > MAX_MODEL_CHARS:
        _abort(context, grpc.StatusCode.INVALID_ARGUMENT,
               f"{where}: trigger metadata {MODEL_KEY!r} is {len(model)} characters long, "
               f"more than a model's name has ({MAX_MODEL_CHARS})")
    return model, metadata


def _value(metadata: Mapping[str, str], key: str) -> str | None:
    """``key``'s value, else ``keyFromEnv``'s (KEDA puts the environment's value there);
    None when neither is given or both are blank."""
    for name in (key, f"{key}FromEnv"):
        value = metadata.get(name, "").strip()
        if value:
            return value
    return None


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with ``code`` and ``message`` on one line (``context.abort`` raises)."""
    context.abort(code, " ".join(message.split()) or "error")
    raise AssertionError("grpc's context.abort returned")  # it raises; this satisfies NoReturn
