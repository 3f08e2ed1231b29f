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
"""

import multiprocessing
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
