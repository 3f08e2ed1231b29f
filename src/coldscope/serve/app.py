"""The HTTP face of ``coldscope serve``: a FastAPI app over a :class:`Service`.

Every JSON answer is what the matching CLI command prints with ``--json`` (the handlers call
the same functions). Safety is one small ASGI layer in front of everything, the OpenAPI pages
included: a bearer token when one is configured (compared in constant time) and a bound on
request bodies (413 past it, whether or not the client sent Content-Length, and the connection
closed: what the client still sends is not read). Bad input is a 400 with
``{"error": "<one line>"}``, the CLI's one-line message.

No handler reads a file or computes on the event loop: predict from a model path, plan,
scale-hint, runs and start-ups run on the service's workers with ``--request-timeout`` (a 503
past it), so ``/metrics`` and ``/healthz`` answer whatever a request is doing; only a prediction
from a features document in the body (no file, a fraction of a millisecond) stays on the loop.
Request headers are bounded in size, and headers and bodies in the time they may take to arrive
(``coldscope.serve.protocol``).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coldscope.core.records import Run
from coldscope.core.version import __version__
from coldscope.planning.result import PlanReport
from coldscope.serve.advise import (
    Advice,
    BadQuery,
    ColdPathParts,
    HintKey,
    ScaleHintAnswer,
    check_query,
)
from coldscope.serve.service import NotConfigured, NotFound, Service, Unavailable
from coldscope.serve.workers import TooSlow
from coldscope.util.errors import ColdscopeError


class Guard:
    """Pure ASGI middleware: bearer token and request-body bound (cheaper per request than
    Starlette's BaseHTTPMiddleware, which matters at hundreds of requests per second)."""

    def __init__(self, app: ASGIApp, token: str | None, max_body_bytes: int,
                 observe: Callable[[str, float], None] | None = None):
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None
        self.max_body = max_body_bytes
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self._handle(scope, receive, send)
        finally:
            if self.observe is not None:
                self.observe(route_of(scope["path"]), time.perf_counter() - started)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        if self.expected is not None and not hmac.compare_digest(
                headers.get(b"authorization", b""), self.expected):
            await _reply(send, 401, {"error": "missing or wrong bearer token"},
                         [(b"www-authenticate", b"Bearer")])
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _reply(send, 413, {"error": f"request body over {self.max_body} bytes"},
                         [_CLOSE])
            return
        seen = 0
        too_large = False
        replied = False

        async def bounded_receive() -> Message:
            # Past the bound the app gets an end of body (FastAPI would turn an exception here
            # into a 400) and its answer is replaced by a 413 below.
            nonlocal seen, too_large
            if too_large:
                return {"type": "http.request", "body": b"", "more_body": False}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    too_large = True
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def bounded_send(message: Message) -> None:
            nonlocal replied
            if not too_large:
                await send(message)
            elif not replied:
                replied = True
                await _reply(send, 413, {"error": f"request body over {self.max_body} bytes"},
                             [_CLOSE])

        await self.app(scope, bounded_receive, bounded_send)


#: A 413's header: the server closes the connection after it instead of reading (and
#: discarding) the rest of a body that may never end.
_CLOSE = (b"connection", b"close")


#: Routes timed by name; any other path is timed as "other" (a bounded label set).
ROUTES = frozenset({"/v1/predict", "/v1/plan", "/v1/runs", "/v1/startups", "/v1/scale-hint",
                    "/metrics", "/healthz", "/openapi.json", "/docs"})


def route_of(path: str) -> str:
    if path in ROUTES:
        return path
    return "/v1/runs/{run_id}" if path.startswith("/v1/runs/") else "other"


async def _reply(send: Send, status: int, body: dict[str, str],
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    from coldscope.util.safeio import dumps_json
    data = dumps_json(body, indent=None).encode()  # valid JSON always: NaN/inf become null
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": data})


def create_app(service: Service, advice: Advice | None = None) -> FastAPI:
    """The app; starting it (its lifespan) starts the watcher and the ``--advise`` loop,
    stopping it stops them. ``advice`` (``serve.advise``; built here when not given) answers
    /v1/scale-hint and keeps the gauges; it is ``app.state.advice``."""
    advice = Advice(service) if advice is None else advice

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            advice.start()
            yield
        finally:
            advice.stop()
            service.stop()

    app = FastAPI(title="coldscope serve", version=__version__, lifespan=lifespan,
                  description="Start-up observability and prediction for LLM-server fleets: "
                              "watched start-ups as runs and Prometheus metrics, prediction, "
                              "planning and scale hints with coldscope's own functions.")

    @app.exception_handler(ColdscopeError)
    async def user_error(request: Request, exc: ColdscopeError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=_status_of(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # 404 for an unknown path, 405 for a wrong method: the same one-line body as the rest
        return JSONResponse({"error": str(exc.detail).splitlines()[0] if exc.detail else ""},
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # one line, like every other error, instead of FastAPI's list of details
        if request.url.path == "/v1/scale-hint":
            try:  # a misspelt parameter is the mistake to name, before the value it lacks
                check_query(request.query_params.multi_items())
            except BadQuery as unknown:
                return JSONResponse({"error": str(unknown)}, status_code=422)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "request"
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid')}"},
                            status_code=422)

    async def work(fn: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
        """``fn`` on a worker with the request time limit: never on the event loop."""
        return await service.workers.run(fn, *args, timeout=service.config.request_timeout,
                                         what=what, **kwargs)

    @app.post("/v1/predict", summary="coldscope predict --json")
    async def predict(body: Annotated[dict[str, Any], Body(
            description="a features document (`coldscope features --json`), "
                        "{\"features\": {...}}, or {\"model\": PATH} under a --model-root; "
                        "optional capture_sizes")]) -> JSONResponse:
        if not service.reads_files(body):
            # a features document: well under a millisecond of CPU, no file; a thread hop
            # would double the latency at hundreds of requests per second
            return JSONResponse(service.predict(body))
        # a model path means file reads and header parsing: on a worker, with a time limit
        return JSONResponse(await work(service.predict, body, what="predict"))

    @app.post("/v1/plan", summary="coldscope plan --json", responses=_doc(PlanReport))
    async def plan(body: Annotated[dict[str, Any], Body(
            description="plan options by their CLI names (model, params, dtype, gpu, mitigate, "
                        "min_workers, products, sla_p99_ttft, cheapest, ...); file options "
                        "(model, profile, traffic, trace, tiers) must lie under a "
                        "--model-root")]) -> JSONResponse:
        return JSONResponse(await work(service.plan, body, what="plan"))

    @app.get("/v1/runs", summary="coldscope runs --json", responses=_doc(RunList))
    async def runs(status: str = Query("all", pattern="^(ok|failed|all)$"),
                   cache: str | None = Query(None, pattern="^(cold|warm)$"),
                   label: str | None = Query(None, max_length=200)) -> JSONResponse:
        return JSONResponse(await work(service.runs, None if status == "all" else status,
                                       cache, label, what="runs"))

    @app.get("/v1/runs/{run_id}", summary="coldscope show RUN_ID --json", responses=_doc(Run))
    async def run(run_id: str) -> JSONResponse:
        if len(run_id) > 200:
            raise ColdscopeError("run id too long")
        return JSONResponse(await work(service.run, run_id, what="show"))

    @app.get("/v1/startups", summary="start-ups in progress in the watched logs")
    async def startups() -> JSONResponse:
        return JSONResponse({"startups": await work(service.in_progress, what="startups")})

    @app.get("/v1/scale-hint", summary="replicas to have now: the scale advisor's first tick at "
                                        "this rate (coldscope.ScaleAdvisor)",
             responses={**_doc(ScaleHintAnswer),
                        404: {"description": "nothing known of the model"},
                        409: {"description": "needs a serve option (--startup-model, "
                                             "--model-root)"},
                        422: {"description": "a bad query: an unknown or repeated parameter, a "
                                             "bad value, an ambiguous model name"}})
    async def scale_hint(request: Request,
                         model: str = Query(..., min_length=1, max_length=4096, description=(
                             "a stored model's name or a directory under a --model-root; case, "
                             "- and _ ignored when no name matches exactly")),
                         rate: float = Query(..., ge=0, le=1e6, allow_inf_nan=False,
                                             description="request rate now, req/s"),
                         sla_p99_ttft: str = Query(..., min_length=1, max_length=32,
                                                   description="P99 TTFT SLA, e.g. 2s"),
                         replica_rps: float | None = Query(
                             None, ge=1e-3, le=1e6, allow_inf_nan=False,
                             description="requests/s one replica serves within the SLA "
                                         "(default: the profile's)"),
                         gpu: str | None = Query(None, min_length=1, max_length=64),
                         params: str | None = Query(None, min_length=1, max_length=32,
                                                    description=(
                             "parameter count (70B), used when no start-up of the model is "
                             "known")),
                         source: Literal["auto", "observed", "predicted"] = Query(
                             "auto", description="the start-up to plan with: the stored runs, "
                                                 "the prediction, or auto (runs when >= 5)"),
                         provisioning_s: float = Query(0.0, ge=0, le=86_400,
                                                       allow_inf_nan=False, description=(
                             "seconds of the cold path before the engine starts: a new node "
                             "(e.g. `coldscope plan --json`'s provisioning part)")),
                         image_pull_s: float = Query(0.0, ge=0, le=86_400, allow_inf_nan=False,
                                                     description="... the image pull"),
                         weight_transfer_s: float = Query(0.0, ge=0, le=86_400,
                                                          allow_inf_nan=False,
                                                          description="... the weights' "
                                                                      "transfer"),
                         startup_saving_s: float = Query(0.0, ge=0, le=86_400,
                                                         allow_inf_nan=False, description=(
                             "seconds a standby launcher on the node takes off every engine "
                             "start-up (`coldscope standby`, measured by `compare "
                             "--b-standby`); refused with provisioning_s: a new node has no "
                             "launcher up"))
                         ) -> JSONResponse:
        check_query(request.query_params.multi_items())
        key = HintKey(model, sla_p99_ttft, source, replica_rps, gpu, params)
        before_engine = ColdPathParts(provisioning_s, image_pull_s, weight_transfer_s,
                                      startup_saving_s)
        try:
            basis = advice.cached(key)  # after the first call: no thread, nothing read
            if basis is None:
                basis = await work(advice.basis, key, what="scale-hint")
            return JSONResponse(advice.hint(basis, rate, before_engine))
        except (BadQuery, NotFound, NotConfigured, Unavailable):
            raise
        except ColdscopeError as exc:  # any other mistake in the query: one status for all
            raise BadQuery(str(exc)) from None

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        # on the loop: the watcher's part is a snapshot and a few counts (no lock), and the
        # per-replica histograms are kept rendered (``StartupMetrics.render``), so this costs
        # milliseconds at the label bounds whatever the watcher and the store are doing
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", summary="liveness")
    async def healthz() -> dict[str, Any]:
        watcher = service.watcher
        return {"ok": True, "watching": len(watcher.tails) if watcher else 0,
                "stored": service.stored, "watch_errors": service.errors()}

    app.state.advice = advice
    app.add_middleware(Guard, token=service.config.token,
                       max_body_bytes=service.config.max_body_bytes,
                       observe=service.metrics.observe_request)
    return app


class RunList(BaseModel):
    """What ``coldscope runs --json`` prints."""

    runs: list[Run]


def _doc(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """The answer's schema for the OpenAPI document only: handlers return the CLI's JSON as
    is (no second validation on the way out)."""
    return {200: {"model": model}, 400: {"description": "bad input: {\"error\": \"one line\"}"}}


def _status_of(exc: ColdscopeError) -> int:
    if isinstance(exc, BadQuery):
        return 422
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, NotConfigured):
        return 409
    if isinstance(exc, Unavailable | TooSlow):
        return 503
    return 400
