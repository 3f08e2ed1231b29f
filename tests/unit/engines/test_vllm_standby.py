"""vLLM's part of a standby launcher: what it imports ahead, and the child hook that makes vLLM's
own process starts fork (``engines/vllm/standby_child.py``), on stand-in modules: the real
engine forked through a launcher is tests/integration/launch/test_standby.py."""

import multiprocessing
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
    imports = [line.split()[1] for line in hook.read_text().splitlines()
               if line.startswith(("import ", "from "))]
    assert imports == ["multiprocessing", "sys"]


@pytest.fixture
def fake_vllm(monkeypatch):
    """Stand-in vLLM modules: ``system_utils`` with vLLM's spawn-forcing ``get_mp_context``,
    and two modules that imported it by name (as vLLM's engine code does), one that did not."""
    calls = []

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
    monkeypatch.setitem(sys.modules, "vllm.utils.system_utils",
                        types.ModuleType("vllm.utils.system_utils"))
    assert _prepare_child()() == 0
