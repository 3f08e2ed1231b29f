"""The environment a start-up ran in: what makes one machine's numbers differ from another's.

Collected once per run by the runner. Engine-side versions are asked of the engine's own
interpreter (the one in the command), not of coldscope's, since they may differ.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from coldscope.core.records import Environment

#: Environment variables that change start-up behaviour (recorded when set).
STARTUP_ENV_PREFIXES = (
    "TORCH", "TORCHINDUCTOR_", "CUDA_", "NCCL_", "OMP_", "MKL_", "HF_", "TRANSFORMERS_",
    "PYTORCH_", "TRITON_", "LD_PRELOAD", "OTEL_", "HOME", "TMPDIR", "XDG_CACHE_HOME",
)


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpus() -> list[dict[str, object]]:
    """GPUs from NVML when its Python binding is installed, else from nvidia-smi, else []."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            out: list[dict[str, object]] = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                out.append({
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total,
                    "driver": pynvml.nvmlSystemGetDriverVersion(),
                    "source": "nvml",
                })
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            text = subprocess.run(
                [smi, "--query-gpu=index,name,memory.total,driver_version",
                 "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout
            out = []
            for line in text.strip().splitlines():
                idx, name, mem, drv = (x.strip() for x in line.split(","))
                out.append({"index": int(idx), "name": name, "memory_bytes": int(mem) * 2**20,
                            "driver": drv, "source": "nvidia-smi"})
            return out
        except (subprocess.SubprocessError, ValueError, OSError):
            pass
    return []


def filesystem_of(path: str | Path | None) -> dict[str, str] | None:
    """Filesystem type and device that hold ``path`` (the weights), from the mount table."""
    if not path:
        return None
    try:
        real = os.path.realpath(path)
        best = None
        for part in psutil.disk_partitions(all=True):
            mp = part.mountpoint
            if (real == mp or real.startswith(mp.rstrip("/") + "/")) and (
                best is None or len(mp) > len(best.mountpoint)
            ):
                best = part
        if best is None:
            return None
        return {"fstype": best.fstype, "device": best.device, "mountpoint": best.mountpoint}
    except OSError:
        return None


_NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre")


def storage_kind(fs: Mapping[str, str | None] | None,
                 sys_block: Path = Path("/sys/block")) -> str | None:
    """What kind of storage a filesystem (``filesystem_of``) lives on: ``tmpfs`` (memory),
    ``nfs`` (any network filesystem), ``nvme``, ``ssd`` or ``hdd`` (from the block device's
    ``rotational`` flag); None when it cannot be told (overlay in a container, no device)."""
    if not fs:
        return None
    fstype = (fs.get("fstype") or "").lower()
    if fstype in ("tmpfs", "ramfs"):
        return "tmpfs"
    if fstype in _NETWORK_FS:
        return "nfs"
    name = Path(fs.get("device") or "").name
    if not name:
        return None
    if name.startswith("nvme"):
        return "nvme"
    disk = name.rstrip("0123456789")  # sda1 -> sda
    try:
        rotational = (sys_block / disk / "queue" / "rotational").read_text().strip()
    except OSError:
        return None
    return {"1": "hdd", "0": "ssd"}.get(rotational)


_ENGINE_VERSIONS = r"""
import json, sys
out = {"python": sys.version.split()[0]}
for name, dists in json.loads(sys.argv[1]).items():
    try:
        from importlib.metadata import version
        for d in dists:
            try:
                out[name] = version(d); break
            except Exception:
                pass
    except Exception:
        pass
print(json.dumps(out))
"""

#: Packages whose versions are recorded when the engine adapter names none: name ->
#: distribution names to try, in order.
DEFAULT_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",), "transformers": ("transformers",), "tokenizers": ("tokenizers",),
}


def engine_versions(python: str | None, packages: Mapping[str, Sequence[str]] = DEFAULT_PACKAGES
                    ) -> dict[str, str | None]:
    """Python and package versions as the engine's interpreter sees them (package metadata
    only: importing torch would take seconds and warm the page cache before a cold run)."""
    if not python:
        return {}
    try:
        arg = json.dumps({k: list(v) for k, v in packages.items()})
        text = subprocess.run([python, "-c", _ENGINE_VERSIONS, arg], capture_output=True,
                              text=True,
                              timeout=30, check=True).stdout
        versions: dict[str, str | None] = json.loads(text.strip().splitlines()[-1])
        return versions
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return {}


def collect(*, engine_python: str | None, weights_path: str | None, env: dict[str, str],
            packages: Mapping[str, Sequence[str]] = DEFAULT_PACKAGES,
            env_prefixes: tuple[str, ...] = ()) -> dict[str, object]:
    """The environment record stored with each run (``records.Environment``): the machine,
    the versions of ``packages`` (the engine adapter's), and the start-up relevant variables
    of ``env`` (``STARTUP_ENV_PREFIXES`` plus the adapter's ``env_prefixes``)."""
    vm = psutil.virtual_memory()
    versions = engine_versions(engine_python, packages)
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu_model": cpu_model(),
        "cpu_cores": psutil.cpu_count(logical=True),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": vm.total,
        "memory_available_bytes": vm.available,
        "gpus": gpus(),
        "weights_fs": filesystem_of(weights_path),
        "env": {k: v for k, v in sorted(env.items())
                if k.startswith(STARTUP_ENV_PREFIXES + env_prefixes)},
        "python": versions.get("python"),
        **{name: versions.get(name) for name in packages},
    }


def machine_name(env: Environment) -> str | None:
    """A short machine description: CPU model and cores, plus GPUs when there are any."""
    cpu = env.cpu_model
    if not cpu:
        return None
    text = f"{cpu} ×{env.cpu_cores}" if env.cpu_cores else str(cpu)
    names = [g.name or "gpu" for g in env.gpus]
    if names:
        text += " · " + (f"{len(names)}× {names[0]}" if len(set(names)) == 1 else ", ".join(names))
    return text
