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
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def serve(host: str, port: int, store_path: str | None, startup_model: str | None,
          watch: tuple[str, ...], glob: str, replica_label: str | None, timeout: float,
          poll_interval: float, model_roots: tuple[str, ...], token_file: str | None,
          max_body: int, request_timeout: float, workers: int, request_memory: int,
          max_header_bytes: int, header_timeout: float,
          body_timeout: float, max_watch_bytes: int, max_replicas: int,
          log_level: str) -> None:
    """Serve start-up metrics, stored runs, predictions, plans and scale hints over HTTP,
    watching engine logs for start-ups (Ctrl-C stops it)."""
    import re

    import uvicorn

    from coldscope.serve.app import create_app
    from coldscope.serve.protocol import bounded_h11
    from coldscope.serve.service import ServeConfig, Service
    if replica_label:
        try:
            re.compile(replica_label)
        except re.error as exc:
            raise ColdscopeError(f"--replica-label is not a regular expression: {exc}") from None
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
                         workers=workers, request_memory=request_memory)
    service = Service(config)
    app = create_app(service)
    # h11 (not httptools): the only uvicorn protocol that bounds header size; ours adds a
    # header-read and a body-read timeout. A graceful shutdown waits 2 s at most for requests
    # in flight, so SIGTERM ends serve within a few seconds whatever they do.
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, lifespan="on",
        http=bounded_h11(header_timeout, max_header_bytes, body_timeout),
        h11_max_incomplete_event_size=max_header_bytes,
        timeout_graceful_shutdown=2))
    server.run()
    if not server.started:
        raise ColdscopeError(f"could not serve on {host}:{port} (see the log above)")


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
