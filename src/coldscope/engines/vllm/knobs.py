"""vLLM's start-up knob catalogue (its ``TuneCatalogue`` role), read from the installed vLLM.

``capabilities(python)`` asks the engine's own interpreter what its vLLM really has: the
environment variables its ``vllm.envs`` module defines (and the defaults it computes for the AOT
ones), the options of its argument parser, the load formats its model-loader registry knows
and which of their packages are importable, whether the model-info cache and ``vllm snapshot``
exist, and the platform. ``catalogue(caps)`` turns that into ``Knob``s: a knob whose variable,
option or package is missing is still listed, with ``available=False`` and the reason, never
offered as if it existed. Snapshot restore also needs ``criu check`` to pass on this machine.
``standby_launcher`` (the engine started through a standby launcher, ``Knob.launcher``) is
listed available: vLLM plays ``StandbyLaunch``; whether the command is one a launcher can run
is the tuner's check (``coldscope.tuning.tune.fit_launcher_knobs``), since the catalogue does
not see the command.

This module knows vLLM; it does not start engines (the runner does) and does not import it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

from coldscope.core.stages import BOOTSTRAP, KV_CACHE_PROFILING, MODEL_LOADING, TORCH_COMPILE
from coldscope.engines.knobs import ALL_CACHES, Knob
from coldscope.util.errors import ColdscopeError

#: Run by the engine's interpreter; prints one JSON object. Imports vLLM's config layer (a few
#: seconds), never a model.
_CAPABILITIES_SCRIPT = r"""
import importlib.util, json, os, sys
out = {"python": sys.version.split()[0]}
try:
    import vllm
    out["version"] = getattr(vllm, "__version__", None)
except Exception as exc:
    print(json.dumps({"error": f"cannot import vllm: {exc!r}"})); sys.exit(0)
try:
    import torch
    out["torch"] = torch.__version__
except Exception:
    out["torch"] = None
import vllm.envs as envs
out["env_vars"] = sorted(getattr(envs, "environment_variables", {}))
defaults = {}
for name, fn in (("VLLM_USE_AOT_COMPILE", "use_aot_compile"),
                 ("VLLM_USE_MEGA_AOT_ARTIFACT", "use_mega_aot_artifact")):
    f = getattr(envs, fn, None)
    if f is not None:
        saved = os.environ.pop(name, None)
        try:
            defaults[name] = bool(f())
        except Exception:
            pass
        if saved is not None:
            os.environ[name] = saved
out["env_defaults"] = defaults
options, load_formats = [], []
try:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    options = sorted({o for a in parser._actions for o in a.option_strings})
except Exception as exc:
    out["parser_error"] = repr(exc)
out["options"] = options
try:
    from vllm.model_executor import model_loader
    load_formats = sorted(getattr(model_loader, "_LOAD_FORMAT_TO_MODEL_LOADER", {}))
except Exception:
    pass
out["load_formats"] = load_formats
out["packages"] = {n: importlib.util.find_spec(n) is not None for n in
                   ("safetensors", "fastsafetensors", "runai_model_streamer", "tensorizer")}
root = os.path.dirname(vllm.__file__)
def has(rel, text):
    try:
        with open(os.path.join(root, rel)) as fh:
            return text in fh.read()
    except OSError:
        return False
out["model_info_cache"] = has("model_executor/models/registry.py", "modelinfos")
out["snapshot_cli"] = os.path.exists(os.path.join(root, "entrypoints/cli/snapshot.py"))
try:
    from vllm.platforms import current_platform
    out["device"] = current_platform.device_type
except Exception:
    out["device"] = None
out["cpu_forces_spawn"] = has("platforms/cpu.py",
                              'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"')
print(json.dumps(out))
"""


def capabilities(python: str | None = None, *, timeout: float = 180.0) -> dict[str, Any]:
    """What the vLLM installed for ``python`` (default: this interpreter) has, plus whether
    ``criu check`` passes here. Raises ``ColdscopeError`` when vLLM cannot be imported."""
    exe = python or sys.executable
    try:
        proc = subprocess.run([exe, "-c", _CAPABILITIES_SCRIPT], capture_output=True, text=True,
                              timeout=timeout, env=_quiet_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ColdscopeError(f"cannot inspect vLLM with {exe}: {exc}") from None
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise ColdscopeError(f"cannot inspect vLLM with {exe}: {tail[0]}")
    caps: dict[str, Any] = json.loads(line)
    if "error" in caps:
        raise ColdscopeError(caps["error"])
    caps["criu"] = criu_check()
    return caps


def _quiet_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def criu_check() -> dict[str, Any]:
    """``{"ok": bool, "detail": str}``: whether CRIU can checkpoint/restore on this machine."""
    exe = shutil.which("criu")
    if exe is None:
        return {"ok": False, "detail": "criu is not installed (no `criu` on PATH)"}
    try:
        proc = subprocess.run([exe, "check"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "detail": f"`criu check` could not run: {exc}"}
    text = (proc.stdout + proc.stderr).strip().splitlines()
    detail = text[-1] if text else f"exit code {proc.returncode}"
    return {"ok": proc.returncode == 0, "detail": f"`criu check`: {detail}"}


def _env_knob(caps: dict[str, Any], var: str, **kw: Any) -> Knob:
    if var not in set(caps.get("env_vars") or ()):
        kw.update(available=False, reason=f"this vLLM ({caps.get('version')}) has no {var}")
    return Knob(**kw)


def _opt_knob(caps: dict[str, Any], option: str, **kw: Any) -> Knob:
    if option not in set(caps.get("options") or ()):
        kw.update(available=False,
                  reason=f"this vLLM ({caps.get('version')}) has no {option} option")
    return Knob(**kw)


_LOAD_PACKAGES = {"fastsafetensors": "fastsafetensors", "runai_streamer": "runai_model_streamer",
                  "tensorizer": "tensorizer", "safetensors": "safetensors"}


def catalogue(caps: dict[str, Any]) -> list[Knob]:
    """vLLM's knobs for the installed version (``capabilities``), available or not."""
    on_cpu = caps.get("device") == "cpu"
    knobs: list[Knob] = [
        _env_knob(
            caps, "VLLM_CACHE_ROOT", name="warm_caches", stage=TORCH_COMPILE, priority=90,
            description="start from the caches an earlier start-up of this configuration left "
                        "(compile cache, model-info cache, start-up plan): a pre-seeded image",
            tradeoff="the caches must ship with the image (`coldscope bundle`); any change of "
                     "engine, torch, model or flags invalidates them",
            seed=(ALL_CACHES,),
            addresses=("compile_cache_cold", "compile_cache_unknown", "model_inspect_uncached"),
        ),
        _env_knob(
            caps, "VLLM_USE_AOT_COMPILE", name="aot_compile_off", stage=TORCH_COMPILE,
            priority=80, env={"VLLM_USE_AOT_COMPILE": "0"},
            description="VLLM_USE_AOT_COMPILE=0: cache compiled graphs through inductor's cache "
                        "instead of the AOT artifact",
            tradeoff="none at serving time; changes only how compiled graphs are cached and "
                     "loaded",
            requires_compile=True, addresses=("compile_cache_load_failed",),
        ),
        _env_knob(
            caps, "VLLM_USE_MEGA_AOT_ARTIFACT", name="mega_aot_artifact", stage=TORCH_COMPILE,
            priority=60,
            env={"VLLM_USE_MEGA_AOT_ARTIFACT":
                 "0" if (caps.get("env_defaults") or {}).get("VLLM_USE_MEGA_AOT_ARTIFACT")
                 else "1"},
            description="VLLM_USE_MEGA_AOT_ARTIFACT flipped from this torch's default: load "
                        "compiled graphs from one standalone artifact (or not)",
            tradeoff="none at serving time",
            requires_compile=True, addresses=("compile_cache_load_failed",),
            excludes=("aot_compile_off",),
        ),
        _opt_knob(
            caps, "--enforce-eager", name="enforce_eager", stage=TORCH_COMPILE, priority=70,
            add_args=("--enforce-eager",), remove_args=("--no-enforce-eager",),
            description="--enforce-eager: no torch.compile, no CUDA graphs",
            tradeoff="slower serving (no compiled graphs); measured by the serving load",
            turns_compile_off=True, serving_tradeoff=True,
            addresses=("compile_cache_cold", "compile_cache_unknown",
                       "compile_cache_load_failed", "cuda_graph_capture_heavy"),
        ),
        _opt_knob(
            caps, "--compilation-config", name="compile_mode_stock", stage=TORCH_COMPILE,
            priority=40, add_args=("--compilation-config", '{"mode": 1}'),
            description='--compilation-config \'{"mode": 1}\': plain torch.compile instead of '
                        "vLLM's own compile mode",
            tradeoff="serving speed may differ; measured by the serving load",
            requires_compile=True, serving_tradeoff=True,
            addresses=("compile_cache_cold", "compile_cache_load_failed"),
        ),
        _env_knob(
            caps, "VLLM_ENABLE_V1_MULTIPROCESSING", name="multiprocessing_off", stage=BOOTSTRAP,
            priority=75, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
            description="VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core runs in the API "
                        "server's process (one Python start-up and import fewer)",
            tradeoff="request handling and the engine loop share one process and its GIL: "
                     "lower throughput under load; measured by the serving load",
            serving_tradeoff=True, addresses=("repeated_imports",),
        ),
    ]
    mi = Knob(
        name="model_info_cache", stage=BOOTSTRAP, priority=55, seed=("vllm/modelinfos",),
        description="pre-seed vLLM's model-info cache (VLLM_CACHE_ROOT/modelinfos): skips the "
                    "model-inspection subprocess",
        tradeoff="the cache must ship with the image; none at serving time",
        addresses=("model_inspect_uncached",), subsumed_by=("warm_caches",),
    )
    if not caps.get("model_info_cache"):
        mi = mi.model_copy(update={"available": False,
                                   "reason": "this vLLM has no model-info cache"})
    knobs.append(mi)
    plan = _env_knob(
        caps, "VLLM_ENABLE_STARTUP_PLAN", name="startup_plan", stage=KV_CACHE_PROFILING,
        priority=65, env={"VLLM_ENABLE_STARTUP_PLAN": "1"}, seed=("vllm/startup_plan",),
        description="VLLM_ENABLE_STARTUP_PLAN=1: reuse the memory-profiling result (KV-cache "
                    "size) of an earlier start-up with the same hardware and config",
        tradeoff="the plan must ship with the image; applied only while free memory is at "
                 "least the recorded baseline",
        addresses=("kv_profiling_every_start",),
    )
    if plan.available and on_cpu:
        plan = plan.model_copy(update={
            "available": False,
            "reason": "the CPU platform does no memory profiling (the KV cache is sized by "
                      "VLLM_CPU_KVCACHE_SPACE): nothing to reuse"})
    knobs.append(plan)
    formats = set(caps.get("load_formats") or ())
    packages = caps.get("packages") or {}
    for fmt, pkg in _LOAD_PACKAGES.items():
        k = _opt_knob(
            caps, "--load-format", name=f"load_format_{fmt}", stage=MODEL_LOADING, priority=30,
            add_args=("--load-format", fmt),
            description=f"--load-format {fmt}",
            tradeoff="none at serving time; needs the weights in a format it reads",
            addresses=("weights_from_disk",),
        )
        if k.available and fmt not in formats:
            k = k.model_copy(update={"available": False,
                                     "reason": f"this vLLM has no {fmt} loader"})
        elif k.available and not packages.get(pkg):
            k = k.model_copy(update={"available": False,
                                     "reason": f"its package `{pkg}` is not installed"})
        elif k.available and fmt == "safetensors":
            k = k.model_copy(update={"available": False,
                                     "reason": "the default (auto) already loads safetensors "
                                               "when the model has them"})
        knobs.append(k)
    snap = Knob(
        name="snapshot_restore", stage=BOOTSTRAP, priority=95,
        description="`vllm snapshot`: restore a CRIU checkpoint of a started server",
        tradeoff="a checkpoint per model/config/machine type; needs CRIU and privileges",
    )
    criu = caps.get("criu") or {"ok": False, "detail": "criu not checked"}
    if not caps.get("snapshot_cli"):
        snap = snap.model_copy(update={"available": False,
                                       "reason": "this vLLM has no `vllm snapshot`"})
    elif not criu.get("ok"):
        snap = snap.model_copy(update={"available": False,
                                       "reason": f"CRIU does not work here: {criu.get('detail')}"})
    else:
        snap = snap.model_copy(update={
            "available": False,
            "reason": "`vllm snapshot create` needs an immutable remote model with a 40-character "
                      "--revision; coldscope does not drive it yet"})
    knobs.append(snap)
    fork = _env_knob(
        caps, "VLLM_WORKER_MULTIPROC_METHOD", name="worker_fork", stage=BOOTSTRAP, priority=20,
        env={"VLLM_WORKER_MULTIPROC_METHOD": "fork"},
        description="VLLM_WORKER_MULTIPROC_METHOD=fork: fork workers instead of spawning "
                    "(no second import)",
        tradeoff="fork after CUDA initialisation is unsafe on GPUs",
        addresses=("repeated_imports",),
    )
    if fork.available and on_cpu and caps.get("cpu_forces_spawn"):
        fork = fork.model_copy(update={"available": False,
                                       "reason": "vLLM's CPU platform sets "
                                                 "VLLM_WORKER_MULTIPROC_METHOD=spawn itself "
                                                 "when it configures the engine (read in "
                                                 "vllm/platforms/cpu.py, not measured), so "
                                                 "fork would be overridden"})
    knobs.append(fork)
    knobs.append(Knob(
        name="standby_launcher", stage=BOOTSTRAP, priority=85, launcher=True,
        description="start the engine through a standby launcher (`coldscope standby`): "
                    "forked from a process that has imported torch, vLLM and transformers "
                    "for the API server, the engine core and the workers, instead of a new "
                    "interpreter that imports them again",
        tradeoff="needs a running node with the launcher started ahead (its resident "
                 "memory); a new node still pays the imports once. None expected at serving "
                 "time (the same engine and arguments); measured by the serving load",
        addresses=("repeated_imports",),
    ))
    return knobs


def static_caps() -> dict[str, Any]:
    """The catalogue's shape without asking an engine: every knob, availability unknown."""
    return {"version": "unknown", "env_vars": ["VLLM_CACHE_ROOT", "VLLM_USE_AOT_COMPILE",
            "VLLM_USE_MEGA_AOT_ARTIFACT", "VLLM_ENABLE_V1_MULTIPROCESSING",
            "VLLM_ENABLE_STARTUP_PLAN", "VLLM_WORKER_MULTIPROC_METHOD"],
            "options": ["--enforce-eager", "--compilation-config", "--load-format"],
            "load_formats": list(_LOAD_PACKAGES), "packages": dict.fromkeys(
                _LOAD_PACKAGES.values(), True), "model_info_cache": True,
            "snapshot_cli": True, "criu": {"ok": False, "detail": "criu not checked"}}
