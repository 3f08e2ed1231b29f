"""``coldscope serve`` reads only under ``--model-root`` and bounds the work (issue 31).

- one rule for every path a request names (``model``, ``features`` as a string, the plan
  files): a path missing, outside, leading out through a link or looping gets one answer, word
  for word; without a --model-root no path is accepted; nothing of a file outside, and no value
  of a file inside, reaches an answer;
- the work of a heavy request runs in a process of its own: killed at its time limit, at most
  N at once (one more is a 503 at once), its memory bounded;
- safetensors headers are bounded in tensors and bytes before they are parsed: the 75 MB,
  900,000-tensor header that took 28 s (blocking /metrics) is refused at once;
- every numeric request field has a bound (a one-line 400 naming it and its range).

Every input is built here; expected answers come from the request's own text and the rule.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from coldscope.serve.app import create_app
from coldscope.serve.service import ServeConfig, Service
from coldscope.serve.workers import Busy, TooBig, TooSlow, Unavailable, Workers

SHARED = Path(__file__).resolve().parents[4] / "shared"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
SECRET = "SECRET-API-KEY-123"


def _client(tmp_path: Path, startup_model: Path, roots: list[Path], **kw) -> TestClient:
    return TestClient(create_app(Service(ServeConfig(
        store=str(tmp_path / "s.db"), startup_model=str(startup_model),
        model_roots=[str(r) for r in roots], **kw))))


def _layout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A root with a model, links out of it, a loop; a secret file beside it. Returns the root
    and, per kind of refused path, the path as a request would name it."""
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(CONFIGS / "llama-3.2-1b", root / "m")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_text(json.dumps({"hidden_size": SECRET, "layers": 2, "vocab_size": 3,
                                  "size": 1, "gpu": SECRET}))
    (root / "to-secret").symlink_to(secret)
    (root / "to-nowhere").symlink_to(outside / "missing.json")
    (root / "loop").symlink_to(root / "loop")
    return root, {
        "missing inside the root": "nothing-here.json",
        "outside, existing": str(secret),
        "outside, missing": str(outside / "missing.json"),
        "relative escape, existing": "../outside/secret.json",
        "relative escape, missing": "../outside/missing.json",
        "link out, existing": "to-secret",
        "link out, missing": "to-nowhere",
        "link loop": "loop",
    }


#: Every field a request can name a path in: (route, the body around it, field).
PATH_FIELDS = [("/v1/predict", {}, "model"), ("/v1/predict", {}, "features"),
               ("/v1/plan", {"sla_p99_ttft": "2s"}, "model")] + \
    [("/v1/plan", {"params": "7B"}, f) for f in ("profile", "traffic", "trace", "tiers")]


@pytest.mark.parametrize("route, around, field", PATH_FIELDS)
def test_missing_and_outside_get_the_same_answer(tmp_path: Path, startup_model: Path,
                                                 route: str, around: dict,
                                                 field: str) -> None:
    root, paths = _layout(tmp_path)
    client = _client(tmp_path, startup_model, [root])
    answers = {}
    for kind, given in paths.items():
        r = client.post(route, json={**around, field: given})
        assert SECRET not in r.text
        answers[kind] = (r.status_code, r.json()["error"].replace(repr(given), "PATH"))
    # one answer whatever lies at the path: the rule's own words, the path as given
    assert set(answers.values()) == {
        (400, f"{field} path PATH is missing or outside every --model-root")}, answers


@pytest.mark.parametrize("route, around, field", PATH_FIELDS)
def test_without_a_model_root_no_path_is_accepted(tmp_path: Path, startup_model: Path,
                                                  route: str, around: dict,
                                                  field: str) -> None:
    root, paths = _layout(tmp_path)
    client = _client(tmp_path, startup_model, [])
    for given in ("m", str(root / "m"), paths["outside, existing"],
                  paths["outside, missing"]):
        r = client.post(route, json={**around, field: given})
        assert (r.status_code, r.json()) == (400, {"error": (
            f"{field} names a path, and serve reads paths only under a --model-root: start "
            "serve with --model-root DIR")})


def test_features_given_as_a_path_is_read_under_the_root_only(tmp_path: Path,
                                                             startup_model: Path) -> None:
    root, _ = _layout(tmp_path)
    client = _client(tmp_path, startup_model, [root])
    by_model = client.post("/v1/predict", json={"model": "m"})
    by_features = client.post("/v1/predict", json={"features": "m"})
    assert by_model.status_code == by_features.status_code == 200
    assert by_features.json() == by_model.json()


def test_values_of_files_inside_the_root_are_not_quoted(tmp_path: Path,
                                                       startup_model: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    (root / "doc.json").write_text(json.dumps({"hidden_size": SECRET, "layers": 2,
                                               "vocab_size": 3, "size": 1}))
    (root / "arch").mkdir()
    (root / "arch" / "config.json").write_text(json.dumps({"model_type": SECRET,
                                                           "num_hidden_layers": 2}))
    shutil.copytree(CONFIGS / "llama-3.2-1b", root / "w")
    header = json.dumps({"w": {"dtype": SECRET, "shape": [2], "data_offsets": [0, 4]}}).encode()
    (root / "w" / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header +
                                                   b"\0" * 4)
    shutil.copytree(CONFIGS / "llama-3.2-1b", root / "head")
    (root / "head" / "model.safetensors").write_bytes(b"SECRET!!" + b"x" * 100)
    (root / "profile.yaml").write_text(f"gpu: {SECRET}\n")
    (root / "trace.csv").write_text(f"{SECRET},x\n1,2\n")
    client = _client(tmp_path, startup_model, [root])
    cases = [
        ("/v1/predict", {"model": "doc.json"}, "hidden_size must be a number"),
        ("/v1/predict", {"features": "doc.json"}, "hidden_size must be a number"),
        ("/v1/predict", {"model": "arch"}, "unknown architecture for 'arch'"),
        ("/v1/predict", {"model": "w"}, "tensor 'w' in"),
        ("/v1/predict", {"model": "head"}, "is longer than 16777216 B; refused"),
        ("/v1/plan", {"params": "7B", "profile": "profile.yaml"}, "gpu '...' is not in gpus"),
        ("/v1/plan", {"params": "7B", "trace": "trace.csv"}, "unknown trace columns '...'"),
    ]
    secret_number = str(struct.unpack("<Q", b"SECRET!!")[0])
    for route, body, names in cases:
        r = client.post(route, json=body)
        assert r.status_code == 400 and names in r.json()["error"], (body, r.text)
        assert SECRET not in r.text and secret_number not in r.text, r.text


def test_the_cli_still_quotes_the_values_of_the_users_own_files(tmp_path: Path) -> None:
    from coldscope.prediction.features import model_features
    from coldscope.util.errors import ColdscopeError
    (tmp_path / "doc.json").write_text(json.dumps({"hidden_size": "many", "layers": 2,
                                                   "vocab_size": 3, "size": 1}))
    with pytest.raises(ColdscopeError, match="hidden_size must be a number, not 'many'"):
        model_features(tmp_path / "doc.json")


# --- the work: a process of its own ---------------------------------------------------------------

def _sleep_and_tell(pid_file: str) -> None:
    """Runs in a worker process: says which it is, then works for a minute."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(60)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_time_limit_ends_the_work_not_only_the_wait(tmp_path: Path) -> None:
    workers = Workers(1, processes=1)
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(TooSlow, match="did not finish within 10 s; stopped"):
        workers.isolated(_sleep_and_tell, str(pid_file), timeout=10, what="sleep")
    assert time.monotonic() - started < 30  # 60 s of work, stopped at its 10 s limit
    pid = int(pid_file.read_text())
    assert pid != os.getpid() and _gone(pid)  # killed, not left running


def test_at_most_n_heavy_requests_at_once_the_next_is_refused_at_once(tmp_path: Path) -> None:
    workers = Workers(2, processes=1)
    pid_file = tmp_path / "pid"
    busy = threading.Thread(target=lambda: pytest.raises(  # killed below: no answer
        Unavailable, workers.isolated, _sleep_and_tell, str(pid_file), timeout=30))
    busy.start()
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(Busy, match="1 requests that read model files are already running"):
        workers.isolated(os.getpid, timeout=10)
    assert time.monotonic() - started < 5  # refused at once, not queued behind the first
    workers.stop()  # kills the one working
    busy.join(10)
    assert not busy.is_alive() and _gone(int(pid_file.read_text()))
    assert workers.isolated(os.getpid, timeout=30) != os.getpid()  # its slot is free again


def test_memory_per_request_is_bounded() -> None:
    workers = Workers(1, processes=1, memory_bytes=256 * 2**20)
    with pytest.raises(TooBig, match="needed more than 256 MiB of memory"):
        workers.isolated(bytearray, 2 * 2**30, timeout=30)  # 2 GiB asked for
    assert len(workers.isolated(bytearray, 2**20, timeout=30)) == 2**20  # 1 MiB fits


def test_a_heavy_request_past_its_time_is_a_503_and_metrics_answer_meanwhile(
        tmp_path: Path, startup_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coldscope.serve.service as service_module
    root, _ = _layout(tmp_path)
    pid_file = tmp_path / "pid"
    # the real job replaced by one that works for a minute, in its process all the same
    monkeypatch.setattr(service_module, "_predict_job", _sleep_and_tell_job(pid_file))
    client = _client(tmp_path, startup_model, [root], request_timeout=8)
    answers: list = []
    slow = threading.Thread(target=lambda: answers.append(
        client.post("/v1/predict", json={"model": "m"})))
    slow.start()
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for path in ("/metrics", "/healthz"):
        assert client.get(path).status_code == 200
    slow.join(30)
    (r,) = answers
    assert r.status_code == 503 and "did not finish within 8 s" in r.json()["error"]
    deadline = time.monotonic() + 10
    while not _gone(int(pid_file.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(int(pid_file.read_text()))


class _sleep_and_tell_job:  # noqa: N801 - a picklable stand-in for the predict job
    def __init__(self, pid_file: Path) -> None:
        self.pid_file = str(pid_file)

    def __call__(self, *args: object) -> None:
        _sleep_and_tell(self.pid_file)


# --- safetensors headers --------------------------------------------------------------------------

def _header_file(path: Path, tensors: int, name_len: int = 40, dims: int = 2) -> int:
    """A safetensors file whose header lists ``tensors`` 2-element BF16 tensors (no data:
    the header alone is what is measured). Returns the header's bytes."""
    shape = ",".join(["1"] * (dims - 1) + ["2"])
    entries = ",".join(
        f'"{f"model.layers.{i}.w".ljust(name_len, "x")}":{{"dtype":"BF16",'
        f'"shape":[{shape}],"data_offsets":[{4 * i},{4 * i + 4}]}}' for i in range(tensors))
    header = ("{" + entries + "}").encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * (4 * tensors))
    return len(header)


def test_the_900000_tensor_header_is_refused_at_once(tmp_path: Path,
                                                    startup_model: Path) -> None:
    root = tmp_path / "models"
    shutil.copytree(CONFIGS / "llama-3.2-1b", root / "m")
    size = _header_file(root / "m" / "model.safetensors", 900_000, name_len=20)
    assert 70e6 < size < 100e6  # the header: 75 MB, under the format's 100 MB
    client = _client(tmp_path, startup_model, [root])
    started = time.monotonic()
    r = client.post("/v1/predict", json={"model": "m"})
    took = time.monotonic() - started
    assert r.status_code == 400
    assert r.json()["error"] == (f"safetensors header in {(root / 'm').resolve()}/"
                                 "model.safetensors is longer than 16777216 B; refused")
    assert took < 10  # it took 28 s, with /metrics timing out meanwhile


def test_headers_are_bounded_in_tensors_and_values_before_parsing(tmp_path: Path) -> None:
    from coldscope.prediction.features import (
        MAX_HEADER_TENSORS,
        MAX_HEADER_VALUES,
        read_safetensors_header,
    )
    from coldscope.util.errors import ColdscopeError
    _header_file(tmp_path / "many.safetensors", MAX_HEADER_TENSORS + 1, name_len=10)
    with pytest.raises(ColdscopeError, match=f"holds more than {MAX_HEADER_TENSORS} tensors"):
        read_safetensors_header(tmp_path / "many.safetensors")
    pairs = ("{" + ",".join(f'"k{i}":"v"' for i in range(MAX_HEADER_VALUES // 2 + 1)) +
             "}").encode()  # metadata-like pairs, no tensor at all
    (tmp_path / "pairs.safetensors").write_bytes(struct.pack("<Q", len(pairs)) + pairs)
    with pytest.raises(ColdscopeError, match=f"holds more than {MAX_HEADER_VALUES} JSON"):
        read_safetensors_header(tmp_path / "pairs.safetensors")


def test_the_largest_header_within_the_bounds_is_still_counted(tmp_path: Path) -> None:
    from coldscope.prediction.features import MAX_HEADER_TENSORS, model_features
    model = tmp_path / "m"
    shutil.copytree(CONFIGS / "llama-3.2-1b", model)
    _header_file(model / "model.safetensors", MAX_HEADER_TENSORS, name_len=60, dims=16)
    started = time.monotonic()
    features = model_features(model)
    assert features.params == 2 * MAX_HEADER_TENSORS  # each tensor: 2 elements
    assert features.weight_bytes == 4 * MAX_HEADER_TENSORS
    assert time.monotonic() - started < 20  # a hang detector: about half a second


# --- numbers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    ({"storage_bandwidth": 1e-300},
     "storage_bandwidth must be a number of bytes/s in 1e+06-1e+13 (1 MB/s-10 TB/s)"),
    ({"storage_bandwidth": 1e300},
     "storage_bandwidth must be a number of bytes/s in 1e+06-1e+13 (1 MB/s-10 TB/s)"),
    ({"capture_sizes": 10**18}, "capture_sizes must be a whole number in 0-100000"),
    ({"capture_sizes": 10**30}, "capture_sizes must be a whole number in 0-100000"),
    ({"capture_sizes": 2.5}, "capture_sizes must be a whole number in 0-100000"),
    ({"page_cache": "lukewarm"}, "page_cache must be hot or cold"),
])
def test_predict_options_are_bounded(tmp_path: Path, startup_model: Path, extra: dict,
                                     message: str) -> None:
    root, _ = _layout(tmp_path)
    client = _client(tmp_path, startup_model, [root])
    for body in ({"model": "m", **extra}, {"features": {"name": "x", "layers": 2,
                                                        "hidden_size": 8, "vocab_size": 8,
                                                        "size": 1}, **extra}):
        r = client.post("/v1/predict", json=body)
        assert (r.status_code, r.json()) == (400, {"error": message})


@pytest.mark.parametrize("field, value, message", [
    ("params", 10**30, "params = 1000000000000000000000000000000 is not an integer in "
                       "0-100,000,000,000,000"),
    ("size", 1e30, "size = 1e+30 is not a number in 0-100000"),
    ("tokenizer_size", 1e30, "tokenizer_size = 1e+30 is not a number in 0-1.04858e+06"),
])
def test_features_documents_are_bounded(tmp_path: Path, startup_model: Path, field: str,
                                        value: float, message: str) -> None:
    client = _client(tmp_path, startup_model, [])
    doc = {"name": "x", "layers": 2, "hidden_size": 8, "vocab_size": 8, "size": 1,
           field: value}
    r = client.post("/v1/predict", json={"features": doc})
    assert (r.status_code, r.json()) == (400, {"error": f"malformed features JSON for 'x': "
                                                        f"{message}"})


def test_a_features_json_document_out_of_bounds_is_one_line(tmp_path: Path,
                                                           startup_model: Path) -> None:
    client = _client(tmp_path, startup_model, [])
    doc = {"name": "x", "source": "features", "params": 10**18, "params_source": "published",
           "weight_bytes": 2, "bytes_per_param": 2.0, "num_layers": 2}
    r = client.post("/v1/predict", json=doc)
    assert r.status_code == 400
    assert r.json()["error"] == ("model features: params: Input should be less than or equal "
                                 "to 100000000000000")


@pytest.mark.parametrize("query, status, message", [
    ({"replica_rps": 1e-300}, 422,
     "query.replica_rps: Input should be greater than or equal to 0.001"),
    ({"sla_p99_ttft": "1e300s"}, 422, "sla_p99_ttft must be 1 ms to 24 h, not '1e300s'"),
    ({"sla_p99_ttft": "1e-300s"}, 422, "sla_p99_ttft must be 1 ms to 24 h, not '1e-300s'"),
    ({"rate": 1e6, "replica_rps": 0.5}, 422,
     "rate / replica_rps asks for more than 1,000,000 replicas (rate 1e+06 req/s, one "
     "replica 0.5 req/s); check both"),
])
def test_scale_hint_numbers_are_bounded(tmp_path: Path, startup_model: Path, query: dict,
                                        status: int, message: str) -> None:
    client = _client(tmp_path, startup_model, [])
    r = client.get("/v1/scale-hint", params={"model": "m", "rate": 1, "sla_p99_ttft": "2s",
                                             "params": "7B", **query})
    assert (r.status_code, r.json()) == (status, {"error": message})


@pytest.mark.parametrize("sla", ["1e300s", "1e-300s"])
def test_plan_sla_is_bounded(tmp_path: Path, startup_model: Path, sla: str) -> None:
    client = _client(tmp_path, startup_model, [])
    r = client.post("/v1/plan", json={"params": "7B", "sla_p99_ttft": sla})
    assert (r.status_code, r.json()) == (
        400, {"error": f"--sla-p99-ttft must be 1 ms to 24 h, not {sla!r}"})
