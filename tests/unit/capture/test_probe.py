"""The in-process probe in a real Python child process, and the reading of its events."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coldscope.capture.probe import (
    PROBE_DIR,
    probe_spans,
    processes_from_events,
    read_probe_events,
)


def read_probe_dir(directory):
    return processes_from_events(read_probe_events(directory))

ENGINE = '''
import multiprocessing as mp, time
import fakevllm

def child():
    fakevllm.Worker().load_model()

if __name__ == "__main__":
    time.sleep(0.2)
    fakevllm.tokenizer()
    p = mp.get_context("spawn").Process(target=child)
    p.start(); p.join()
'''

FAKE = '''
import asyncio, time

def tokenizer():
    """Loads the tokenizer."""
    time.sleep(0.1)

async def serve(port: int) -> str:
    await asyncio.sleep(0.05)
    return "served"

class Worker:
    def load_model(self):
        time.sleep(0.3)
'''


def run_probed(tmp_path: Path, extra_site: bool = False) -> tuple[float, int, Path]:
    (tmp_path / "fakevllm.py").write_text(FAKE)
    (tmp_path / "engine.py").write_text(ENGINE)
    probe_out = tmp_path / "probe"
    probe_out.mkdir()
    paths = [str(PROBE_DIR), str(tmp_path)]
    if extra_site:
        other = tmp_path / "othersite"
        other.mkdir()
        (other / "sitecustomize.py").write_text(
            "import os\nopen(os.environ['MARK'], 'w').write('chained')\n")
        paths.append(str(other))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), COLDSCOPE_PROBE_DIR=str(probe_out),
               COLDSCOPE_PROBE_HOOKS="fakevllm:tokenizer=tokenizer;"
                                     "fakevllm:Worker.load_model=model_loading",
               MARK=str(tmp_path / "mark"))
    launch = time.monotonic()
    proc = subprocess.run([sys.executable, str(tmp_path / "engine.py")], env=env, timeout=60,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return launch, proc, probe_out


def test_probe_times_hooks_in_every_process(tmp_path):
    launch, proc, out = run_probed(tmp_path)
    procs = read_probe_dir(out)
    assert len(procs) >= 2  # the engine and its spawned child (plus multiprocessing helpers)
    root = next(p for p in procs if p.ppid == os.getpid())  # the process we launched
    [(a, b)] = root.intervals("tokenizer")
    assert b - a == pytest.approx(0.1, abs=0.08)
    child = next(p for p in procs if p.intervals("model_loading"))
    assert child.pid != root.pid
    [(a, b)] = child.intervals("model_loading")
    assert b - a == pytest.approx(0.3, abs=0.1)
    # all events on one clock: the child's work comes after the parent's tokenizer
    assert a > root.intervals("tokenizer")[0][1]

    spans = probe_spans(procs, launch_mono=launch, root_pid=root.pid, ready_at=None,
                        compile_enabled=False)
    by_name = {s.name: s for s in spans}
    assert by_name["bootstrap"].start == 0.0
    assert by_name["bootstrap"].end == pytest.approx(by_name["model_loading"].start)
    assert 0 < by_name["bootstrap/interpreter"].end < 2
    # the probe times itself: a few milliseconds per process, never zero
    assert all(0 < p.cost < 0.5 for p in procs if len(p.events) > 1)


def test_probe_chains_an_existing_sitecustomize(tmp_path):
    run_probed(tmp_path, extra_site=True)
    assert (tmp_path / "mark").read_text() == "chained"
    # the probe loads it without writing byte code beside it (it may be the engine's install)
    assert not (tmp_path / "othersite" / "__pycache__").exists()


def test_reader_skips_torn_lines(tmp_path):
    (tmp_path / "probe-1.jsonl").write_text(
        '{"ev": "process", "name": "process", "mono": 1.0, "wall": 1.0, "pid": 1}\n'
        '{"ev": "begin", "name": "tokenizer", "mono": 2.0, "pid": 1}\n'
        '{"ev": "end", "name": "tokeni'
    )
    [p] = read_probe_dir(tmp_path)
    assert p.intervals("tokenizer") == []
    assert [e["ev"] for e in p.events] == ["process", "begin"]


def _modules_after_startup(env: dict) -> set[str]:
    out = subprocess.run([sys.executable, "-c", "import sys; print(' '.join(sys.modules))"],
                         env=env, capture_output=True, text=True, timeout=60, check=True)
    return set(out.stdout.split())


def test_probe_loads_no_module_a_bare_interpreter_does_not(tmp_path):
    """json, threading or importlib.abc at start-up cost ~27 ms in every engine process."""
    bare = _modules_after_startup(dict(os.environ))
    probed = _modules_after_startup(dict(os.environ, PYTHONPATH=str(PROBE_DIR),
                                         COLDSCOPE_PROBE_DIR=str(tmp_path)))
    assert probed - bare <= {"sitecustomize", "atexit"}
    assert len(list(tmp_path.glob("probe-*.jsonl"))) == 1  # and it did arm itself


def test_probe_event_encoding_is_json():
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("_probe_under_test",
                                                  PROBE_DIR / "sitecustomize.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)  # inert here: COLDSCOPE_PROBE_DIR is not set
    record = {"argv": ['-c', 'print("a\\b")\n', "naïve ☃", "\udcff", "\x00\t"], "mono": 12.5,
              "pid": 7, "ok": True, "none": None, "nan": float("nan"), "nested": {"k": [1, 2.0]}}
    back = json.loads(probe._dumps(record))
    assert back["argv"][:3] == record["argv"][:3]
    assert back["argv"][3] == "\udcff" and back["argv"][4] == "\x00\t"
    assert back["nan"] is None
    assert {k: back[k] for k in ("mono", "pid", "ok", "none", "nested")} == {
        "mono": 12.5, "pid": 7, "ok": True, "none": None, "nested": {"k": [1, 2.0]}}


INTROSPECT = '''
import asyncio, importlib, inspect, json, sys
import fakevllm

report = {
    "serve_is_coroutine": inspect.iscoroutinefunction(fakevllm.serve),
    "serve_result": asyncio.run(fakevllm.serve(1)),
    "serve_signature": str(inspect.signature(fakevllm.serve)),
    "tokenizer_name": fakevllm.tokenizer.__name__,
    "tokenizer_doc": fakevllm.tokenizer.__doc__,
    "wrapped": hasattr(fakevllm.tokenizer, "__wrapped__"),
    "loader": type(fakevllm.__loader__).__name__,
    "spec_loader": type(fakevllm.__spec__.loader).__name__,
    "reloaded": importlib.reload(fakevllm) is fakevllm,
}
print(json.dumps(report))
'''


def test_wrapped_functions_look_the_same_to_introspection(tmp_path):
    """functools.wraps semantics, coroutine functions stay coroutine functions, and the
    module's loader is the real one (issue 14, item 7)."""
    (tmp_path / "fakevllm.py").write_text(FAKE)
    (tmp_path / "introspect.py").write_text(INTROSPECT)
    probe_out = tmp_path / "probe"
    probe_out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PROBE_DIR), str(tmp_path)]),
               COLDSCOPE_PROBE_DIR=str(probe_out),
               COLDSCOPE_PROBE_HOOKS="fakevllm:tokenizer=tokenizer;fakevllm:serve=server_ready")
    proc = subprocess.run([sys.executable, str(tmp_path / "introspect.py")], env=env,
                          timeout=60, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    import json

    report = json.loads(proc.stdout.splitlines()[-1])
    assert report == {
        "serve_is_coroutine": True, "serve_result": "served",
        "serve_signature": "(port: int) -> str", "tokenizer_name": "tokenizer",
        "tokenizer_doc": "Loads the tokenizer.", "wrapped": True,
        "loader": "SourceFileLoader", "spec_loader": "SourceFileLoader", "reloaded": True,
    }
    [root] = [p for p in read_probe_dir(probe_out) if p.intervals("server_ready")]
    [(a, b)] = root.intervals("server_ready")
    assert b - a >= 0.04  # timed until the coroutine finished, not until it was created


def _events(pid, ppid, loaded, start, *marks):
    """A process's probe events: loaded at ``loaded`` (started at ``start``, /proc's clock),
    then (kind, name, t) events."""
    out = [{"ev": "process", "name": "process", "mono": loaded, "pid": pid, "ppid": ppid,
            "start_mono": start}]
    out += [{"ev": ev, "name": name, "mono": t, "pid": pid} for ev, name, t in marks]
    return out


def _vllm_like_events():
    # launched at mono 100 (the root started at /proc time 100: no clock offset)
    api = _events(1, None, 101.0, 100.0, ("begin", "bootstrap/engine_config", 105.0),
                  ("end", "bootstrap/engine_config", 106.0))
    core = _events(2, 1, 110.0, 108.0, ("begin", "mark:engine_core_init", 112.0),
                   ("begin", "mark:engine_core_main", 114.0))
    worker = _events(3, 2, 118.0, 116.0, ("begin", "mark:worker_init", 119.0),
                     ("begin", "mark:worker_main", 121.0), ("begin", "model_loading", 125.0),
                     ("end", "model_loading", 127.0))
    helper = _events(4, 1, 103.0, 102.5)
    return api + core + worker + helper


def test_process_roles_and_their_start_substeps_come_from_the_adapter():
    from coldscope.engines import process_roles_of
    from coldscope.engines.sglang import SGLang
    from coldscope.engines.vllm import VLLM
    procs = processes_from_events(_vllm_like_events(), VLLM().process_roles)
    assert {p.pid: p.role for p in procs} == {1: "helper", 2: "engine_core", 3: "worker",
                                              4: "helper"}
    spans = probe_spans(procs, launch_mono=100.0, root_pid=1, ready_at=30.0,
                        compile_enabled=False, roles=VLLM().process_roles)
    got = {(s.name, s.pid): (round(s.start, 6), round(s.end, 6)) for s in spans}
    assert got[("bootstrap", 1)] == (0.0, 25.0)  # to the first model loading
    assert got[("bootstrap/api_server_imports", 1)] == (1.0, 5.0)  # loaded -> first hook
    # a child's start runs from its /proc start to its main mark's first begin
    assert got[("bootstrap/engine_core_start", 2)] == (8.0, 14.0)
    assert got[("bootstrap/worker_start", 3)] == (16.0, 21.0)
    assert got[("bootstrap/worker_init", 3)] == (19.0, 25.0)
    assert [p.role for p in procs if p.pid == 1] == ["api_server"]  # the launched process
    # an adapter without roles (SGLang's, for now): its children are helpers, no start
    # sub-steps are made up for them
    procs = processes_from_events(_vllm_like_events(), process_roles_of(SGLang()))
    assert {p.role for p in procs if p.pid != 1} == {"helper"}
    spans = probe_spans(procs, launch_mono=100.0, root_pid=1, ready_at=30.0,
                        compile_enabled=False, roles=process_roles_of(SGLang()))
    assert not [s for s in spans if s.name.endswith(("_start", "worker_init"))]


ARMED = '''
import os, sys, time
import fakevllm                    # imported before recording starts, hooks placed as it loads
import sitecustomize
fakevllm.tokenizer()               # armed but silent: not recorded
assert sitecustomize.activate(sys.argv[1])
fakevllm.tokenizer()               # recorded in this process
pid = os.fork()
if pid == 0:
    fakevllm.Worker().load_model()  # recorded in the forked child's own file
    os._exit(0)
os.waitpid(pid, 0)
print(pid)
'''


def test_an_armed_probe_records_only_once_activated_and_in_forked_children(tmp_path):
    """A standby launcher loads the probe armed (hooks placed, nothing written) and its child
    activates it with the run's directory after the fork; a child forked from there writes its
    own file with its own process event (its start in /proc is the fork)."""
    (tmp_path / "fakevllm.py").write_text(FAKE)
    (tmp_path / "armed.py").write_text(ARMED)
    out = tmp_path / "probe"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLDSCOPE_")}
    env.update(PYTHONPATH=os.pathsep.join([str(PROBE_DIR), str(tmp_path)]),
               COLDSCOPE_PROBE_ARMED="1",
               COLDSCOPE_PROBE_HOOKS="fakevllm:tokenizer=tokenizer;"
                                     "fakevllm:Worker.load_model=model_loading")
    before = time.monotonic()
    done = subprocess.run([sys.executable, str(tmp_path / "armed.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    child = int(done.stdout.strip())
    events = read_probe_events(out)
    by_pid: dict[int, list[tuple[str, str]]] = {}
    for e in events:
        by_pid.setdefault(e["pid"], []).append((e["ev"], e["name"]))
    (parent,) = set(by_pid) - {child}
    assert by_pid[parent] == [("process", "process"), ("begin", "tokenizer"),
                              ("end", "tokenizer"), ("exit", "exit")]
    assert by_pid[child] == [("process", "process"), ("begin", "model_loading"),
                             ("end", "model_loading")]
    (forked,) = [e for e in events if e["pid"] == child and e["ev"] == "process"]
    (own,) = [e for e in events if e["pid"] == parent and e["ev"] == "process"]
    assert forked["ppid"] == parent
    # its start is the fork's, after the parent's (one clock: /proc's ticks, 10 ms)
    assert forked["start_mono"] >= own["start_mono"]
    assert forked["mono"] >= own["mono"] >= before
