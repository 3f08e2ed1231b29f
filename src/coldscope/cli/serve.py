"""``coldscope serve``: start-up observability and prediction as a local HTTP service."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat

import click

from coldscope.cli.common import echo, store_option
from coldscope.util.errors import ColdscopeError


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; loopback unless you say otherwise.")
@click.option("--port", default=8780, show_default=True, type=click.IntRange(0, 65535))
@store_option
@click.option("--startup-model", "startup_model", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Startup model JSON (coldscope fit): enables /v1/predict, "
                                 "scale hints from predictions and the prediction metrics.")
@click.option("--watch", "watch", multiple=True, type=click.Path(),
              help="Engine log file or directory to follow (repeatable).")
@click.option("--glob", default="*.log", show_default=True,
              help="File names to follow inside watched directories.")
@click.option("--replica-label", default=None, metavar="REGEX",
              help="Replica name from the log's path: the first group (or the match) of "
                   "REGEX; default: the file name without .log.")
@click.option("--timeout", default=900.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds after its first line before a start-up that never became ready "
                   "is stored as failed.")
@click.option("--poll-interval", default=0.2, show_default=True,
              type=click.FloatRange(0.01, 10), help="Seconds between looks at the logs.")
@click.option("--model-root", "model_roots", multiple=True,
              type=click.Path(exists=True, file_okay=False),
              help="Directory whose models (and plan files) requests may name (repeatable); "
                   "no path outside it is read.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File holding a bearer token every request must carry.")
@click.option("--max-body", "max_body", default=1024 * 1024, show_default=True,
              type=click.IntRange(1024), help="Largest request body, in bytes.")
@click.option("--request-timeout", default=30.0, show_default=True,
              type=click.FloatRange(0.1, 3600),
              help="Seconds one request's work (file reads, prediction, plan) may take; "
                   "then 503, and work that reads model files is stopped.")
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Requests that read model files (predict from a path, plan, scale hints "
                   "from a model) served at once, each in a process of its own; one more "
                   "gets 503 at once.")
@click.option("--request-memory", default=1024 * 1024 * 1024, show_default=True,
              type=click.IntRange(64 * 1024 * 1024),
              help="Memory, in bytes, one such request's process may add to what it starts "
                   "with (then 503).")
@click.option("--max-header-bytes", default=16 * 1024, show_default=True,
              type=click.IntRange(1024, 1024 * 1024),
              help="Largest request line and headers, in bytes (then 400).")
@click.option("--header-timeout", default=10.0, show_default=True,
              type=click.FloatRange(0.1, 600),
              help="Seconds a client may take to send a request's headers (then the "
                   "connection is closed).")
@click.option("--body-timeout", default=10.0, show_default=True,
              type=click.FloatRange(0.1, 600),
              help="Seconds a client may take to send a request's body once its headers are "
                   "in (then 408 and the connection is closed).")
@click.option("--max-watch-bytes", default=256 * 1024 * 1024, show_default=True,
              type=click.IntRange(1024 * 1024),
              help="Log text all running start-ups may hold together, in bytes (past it the "
                   "biggest is failed).")
@click.option("--max-replicas", default=512, show_default=True, type=click.IntRange(1),
              help="Distinct replica label values in the metrics (then 'other').")
@click.option("--advise", "advise", multiple=True, metavar="MODEL",
              help="Keep coldscope_desired_replicas{model=MODEL} and "
                   "coldscope_scale_ahead_seconds on /metrics from the scale advisor, ticked "
                   "on the rate --rate-query gives (repeatable; needs --sla-p99-ttft and "
                   "--prometheus). MODEL is named as /v1/scale-hint's model.")
@click.option("--sla-p99-ttft", "sla_p99_ttft", default=None, metavar="DURATION",
              help="P99 TTFT SLA of the --advise models (2s, 500ms): their warm floor.")
@click.option("--prometheus", default=None, metavar="URL",
              help="Prometheus to ask the --advise models' request rate (its /api/v1/query).")
@click.option("--rate-query", default=None, metavar="PROMQL",
              help="PromQL giving one --advise model's request rate (req/s); {model} is "
                   "replaced by its name. Default: "
                   "sum(rate(vllm:request_success_total{model_name=\"{model}\"}[1m])).")
@click.option("--advise-interval", default=5.0, show_default=True,
              type=click.FloatRange(0.5, 3600),
              help="Seconds between two ticks of the --advise models.")
@click.option("--replica-rps", default=None, type=click.FloatRange(1e-3, 1e6),
              help="Requests/s one replica of an --advise model serves within the SLA "
                   "(default: the planner profile's).")
@click.option("--advise-source", type=click.Choice(["auto", "observed", "predicted"]),
              default="auto", show_default=True,
              help="The start-up the --advise models plan with: stored runs, the prediction, "
                   "or the runs when there are 5 or more.")
@click.option("--keda-grpc", "keda_grpc", default=None, type=click.IntRange(1, 65535),
              metavar="PORT",
              help="Also serve KEDA's external scaler (gRPC externalscaler.ExternalScaler) on "
                   "this port of --host, answering from the --advise models' decisions "
                   "(needs coldscope[keda]).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def serve(host: str, port: int, store_path: str | None, startup_model: str | None,
          watch: tuple[str, ...], glob: str, replica_label: str | None, timeout: float,
          poll_interval: float, model_roots: tuple[str, ...], token_file: str | None,
          max_body: int, request_timeout: float, workers: int, request_memory: int,
          max_header_bytes: int, header_timeout: float,
          body_timeout: float, max_watch_bytes: int, max_replicas: int,
          advise: tuple[str, ...], sla_p99_ttft: str | None, prometheus: str | None,
          rate_query: str | None, advise_interval: float, replica_rps: float | None,
          advise_source: str, keda_grpc: int | None, log_level: str) -> None:
    """Serve start-up metrics, stored runs, predictions, plans and scale hints over HTTP,
    watching engine logs for start-ups (Ctrl-C stops it)."""
    import re

    import uvicorn

    from coldscope.serve.advise import Advice
    from coldscope.serve.app import create_app
    from coldscope.serve.protocol import bounded_h11
    from coldscope.serve.service import ServeConfig, Service
    if replica_label:
        try:
            re.compile(replica_label)
        except re.error as exc:
            raise ColdscopeError(f"--replica-label is not a regular expression: {exc}") from None
    _check_advise(advise, sla_p99_ttft, prometheus, rate_query, replica_rps, advise_source)
    if keda_grpc is not None:
        if not advise:
            raise ColdscopeError("--keda-grpc answers from the --advise models: give at least "
                                 "one --advise MODEL (with --sla-p99-ttft and --prometheus)")
        if keda_grpc == port:
            raise ColdscopeError(f"--keda-grpc {keda_grpc} is also serve's HTTP --port")
        from coldscope.integrations import keda  # a missing extra is one line, here
    token = _read_token(token_file) if token_file else None
    if not _is_loopback(host) and token is None:
        echo(f"warning: listening on {host} without --token-file: anyone who can reach "
             "it can read runs and metrics", err=True)
    _check_port(host, port)
    # log lines name watched files and replicas: no control sequence of theirs reaches stderr
    handler = logging.StreamHandler()
    handler.setFormatter(_CleanFormatter("%(asctime)s %(name)s %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    config = ServeConfig(store=store_path, startup_model=startup_model, watch=list(watch),
                         glob=glob, replica_label=replica_label, timeout=timeout,
                         poll_interval=poll_interval, model_roots=list(model_roots),
                         token=token, max_body_bytes=max_body, max_replicas=max_replicas,
                         request_timeout=request_timeout, max_watch_bytes=max_watch_bytes,
                         workers=workers, request_memory=request_memory,
                         advise=list(advise), sla_p99_ttft=sla_p99_ttft, prometheus=prometheus,
                         advise_interval=advise_interval, replica_rps=replica_rps,
                         advise_source=advise_source)
    if rate_query is not None:
        config.rate_query = rate_query
    service = Service(config)
    try:  # each --advise model's start-up is found now: a model it cannot advise on stops here
        advice = Advice(service)
        advice.prepare()
    except BaseException:
        service.workers.stop()
        raise
    keda_server = None
    if keda_grpc is not None:
        try:  # the advise loop's decisions, the same as /metrics' gauges
            keda_server = keda.serve_keda(
                keda_grpc, keda.provider_from(advice.decision, advice.models,
                                              sla_p99_ttft_s=advice.sla_p99_ttft_s),
                host=host)
        except BaseException:
            service.workers.stop()
            raise
        if not _is_loopback(host):
            echo(f"warning: KEDA's gRPC scaler on {host}:{keda_grpc} has no token: anyone who "
                 "can reach it can read the advised models' decisions", err=True)
    app = create_app(service, advice)
    # h11 (not httptools): the only uvicorn protocol that bounds header size; ours adds a
    # header-read and a body-read timeout. A graceful shutdown waits 2 s at most for requests
    # in flight, so SIGTERM ends serve within a few seconds whatever they do.
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, lifespan="on",
        http=bounded_h11(header_timeout, max_header_bytes, body_timeout),
        h11_max_incomplete_event_size=max_header_bytes,
        timeout_graceful_shutdown=2))
    try:
        server.run()
    finally:
        if keda_server is not None:
            keda_server.stop(1.0).wait(5.0)
    if not server.started:
        raise ColdscopeError(f"could not serve on {host}:{port} (see the log above)")


def _check_advise(advise: tuple[str, ...], sla: str | None, prometheus: str | None,
                  rate_query: str | None, replica_rps: float | None, source: str) -> None:
    """The --advise flags go together; each mistake is one line before anything starts."""
    if not advise:
        given = [flag for flag, value in (("--sla-p99-ttft", sla), ("--prometheus", prometheus),
                                          ("--rate-query", rate_query),
                                          ("--replica-rps", replica_rps)) if value is not None]
        if given or source != "auto":
            raise ColdscopeError(f"{(given or ['--advise-source'])[0]} is for --advise MODEL: "
                                 "give the models to keep gauges of")
        return
    if sla is None:
        raise ColdscopeError("--advise needs --sla-p99-ttft (e.g. 2s): the warm floor is "
                             "kept for it")
    if prometheus is None:
        raise ColdscopeError("--advise needs --prometheus URL: the request rate comes from a "
                             "PromQL query (--rate-query); the watched logs show start-ups, "
                             "not requests")
    from coldscope.planning.hint import sla_seconds
    from coldscope.serve.advise import check_rate_query, check_url
    try:
        sla_seconds(sla)
    except ColdscopeError as exc:
        raise ColdscopeError(f"--sla-p99-ttft: {exc}") from None
    check_url(prometheus)
    if rate_query is not None:
        check_rate_query(rate_query)
    for model in advise:
        if not model.strip() or len(model) > 4096 or "\x00" in model:
            raise ColdscopeError(f"--advise {model[:60]!r} is not a model name")


class _CleanFormatter(logging.Formatter):
    """Log records with terminal control sequences removed (``safeio.clean_text``)."""

    def format(self, record: logging.LogRecord) -> str:
        from coldscope.util.safeio import clean_text
        return clean_text(super().format(record))


#: Bytes a --token-file may hold (one token of at most 4096 characters, and a line break).
MAX_TOKEN_FILE_BYTES = 8192


def _read_token(path: str) -> str:
    from coldscope.util.safeio import read_text
    # A regular file of at most a few KB: /dev/zero or a FIFO is refused before a byte is read.
    token = read_text(path, limit=MAX_TOKEN_FILE_BYTES, what="--token-file").strip()
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        echo(f"warning: {path} is readable by other users; chmod 600 it", err=True)
    if not token or any(c.isspace() for c in token) or len(token) > 4096:
        raise ColdscopeError(f"--token-file {path} must hold one token (no spaces, at most "
                             "4096 characters)")
    return token


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_port(host: str, port: int) -> None:
    """Fail with one line, before anything starts, when the address cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ColdscopeError(f"--host {host}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            raise ColdscopeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
