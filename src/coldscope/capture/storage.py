"""Storage evidence of one start-up: how much of the weights the page cache held at launch
(``mincore``), and what the loading process read from storage while it loaded them.

The first is measured by the runner just before it launches the engine; the second comes from
the probe (``io_read`` at the begin and end of ``model_loading/weights``, from
``/proc/PID/io``'s ``read_bytes``: bytes the process caused to be fetched from storage, page
faults on mapped files included, page-cache hits not). Together they say whether a start-up's
weights came from disk, how much, and how fast: the evidence of ``weights_from_disk``.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

#: Suffixes of weight files (checkpoints) in a model directory.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")

_PROT_READ = 0x1
_MAP_SHARED = 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class Residency:
    """The weight files of a model directory and how many of their bytes the page cache held
    (whole pages, so ``resident_bytes`` of a file is rounded to pages, at most its size)."""

    files: int
    bytes: int
    resident_bytes: int

    @property
    def share(self) -> float | None:
        return self.resident_bytes / self.bytes if self.bytes else None


def weight_files(model_path: str | os.PathLike[str]) -> list[Path]:
    """The checkpoint files of a local model directory (any depth), by name."""
    root = Path(model_path)
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library's mmap/munmap/mincore, set up once (the process's own libc, as the
    runner's prctl: no ``find_library``, which runs ldconfig, per weight file)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_ubyte))
    return libc


def resident_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes of ``path`` in the page cache now (``mincore`` over a read-only mapping, which
    reads nothing); None where the system cannot say."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    try:
        libc = _libc()
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        addr = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            return None
        try:
            page = mmap.PAGESIZE
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return None
            resident = sum(v & 1 for v in vec)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return min(resident * mmap.PAGESIZE, size)


def residency(model_path: str | os.PathLike[str] | None) -> Residency | None:
    """The page cache's share of a local model's weight files now; None for a model that is
    not a local directory with weight files, or a system without ``mincore``."""
    if not model_path:
        return None
    files = weight_files(model_path)
    if not files:
        return None
    total = held = 0
    for f in files:
        got = resident_bytes(f)
        if got is None:
            return None
        total += f.stat().st_size
        held += got
    return Residency(len(files), total, held)
