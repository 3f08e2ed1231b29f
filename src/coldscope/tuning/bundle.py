"""Cache bundles: the pre-seeded image layer as a file.

A bundle is a ``.tar.gz`` with ``manifest.json`` first and the caches under ``caches/`` (the
cache root a start-up used: for vLLM its cache root with its compile cache, model-info cache
and start-up plan, inductor's and triton's caches; whatever the engine's adapter points there,
``Engine.cache_env``). The manifest says what the caches are valid for: the engine (the
adapter's name), its torch and Python versions, a SHA-256 of the model's config and weight files,
the machine's CPU and GPUs, and the configuration (knobs, command line, environment).

Unpacking checks the manifest first and refuses, with one line, a bundle made for another
engine, engine version, torch version or model. A bundle is hostile input, so unpacking does
not trust ``tarfile``'s extraction (its ``filter="data"`` is bypassable on Python before 3.11.13,
CVE-2025-4517): this module reads the archive itself, header by header from a bounded gzip
stream, and checks every member before writing it (see ``unpack``). It extracts into a
temporary sibling directory and renames it into place only when every member passed, so a
refused bundle extracts nothing and a cache root is never half-seeded.

Packing takes the session's own files only: regular files under the configuration's cache
root, found without following links (a symbolic link is never packed); the root must lie
inside the session once resolved; and a file with hard links elsewhere than in the session
(``st_nlink`` above the links to it found in the session's directory) is refused, so a link
made to an outside file cannot carry its content into a bundle. Each file is opened without
following links and packed from that descriptor, checked to be the file that was walked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import atomic_path, loads_json, open_regular

if TYPE_CHECKING:
    from coldscope.engines import Engine
    from coldscope.tuning.session import SessionSpec
FORMAT = "coldscope-bundle/1"
MANIFEST = "manifest.json"
_MODEL_FILES = (".json", ".safetensors", ".bin", ".pt", ".model", ".txt", ".tiktoken")

#: Default bound on a bundle's uncompressed size, tar headers included (16 GiB; real cache
#: roots are a few hundred MB to a few GB). Counted while the gzip stream is read, so a gzip
#: bomb stops at the bound. Raise it with ``COLDSCOPE_MAX_BUNDLE_BYTES``.
MAX_BUNDLE_BYTES = 16 * 1024**3
#: Default bound on the number of members (100,000; inductor and triton caches hold thousands
#: of small files). Raise it with ``COLDSCOPE_MAX_BUNDLE_MEMBERS``.
MAX_BUNDLE_MEMBERS = 100_000
#: Bound on ``manifest.json`` (1 MiB; coldscope writes a few KB). Fixed.
MAX_MANIFEST_BYTES = 1024 * 1024
#: Bound on a member's path (bytes of UTF-8), well under PATH_MAX so that resolving a path
#: inside the destination can never overflow; and on one path component (NAME_MAX).
MAX_NAME_BYTES = 1024
MAX_COMPONENT_BYTES = 255
#: Bound on one pax / GNU long-name header's payload, and on how many may precede a member.
_MAX_EXTENSION_BYTES = 64 * 1024
_MAX_EXTENSIONS = 3
#: The manifest's sections and the fields of each that must be strings (or null).
_SECTIONS = {"engine": ("name", "version", "torch", "python"),
             "model": ("path", "name", "sha256"), "config": ("cache_key",), "machine": ()}
_BLOCK = tarfile.BLOCKSIZE
_CHUNK = 1024 * 1024
#: A cache key is a plain name: knob names joined by ``+``, or ``default``.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")
_KINDS = {tarfile.SYMTYPE: "a symlink", tarfile.LNKTYPE: "a hardlink",
          tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
          tarfile.FIFOTYPE: "a FIFO", tarfile.CONTTYPE: "a contiguous file",
          tarfile.GNUTYPE_SPARSE: "a sparse file", tarfile.GNUTYPE_LONGLINK: "a long link name",
          tarfile.XGLTYPE: "a global pax header"}


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


def build_manifest(*, engine: str, engine_version: str | None, torch: str | None,
                   python: str | None, model_path: str | None,
                   config: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a bundle: ``engine`` is the name of the adapter that reads the
    command (``Engine.name``), the versions those the engine's interpreter reported."""
    return {
        "format": FORMAT,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "engine": {"name": engine, "version": engine_version, "torch": torch,
                   "python": python},
        "model": {"path": str(model_path) if model_path else None,
                  "name": Path(str(model_path)).name if model_path else None,
                  "sha256": model_sha256(model_path)},
        "machine": _machine(),
        "config": config,
    }


def _regular_files(root: Path) -> list[tuple[Path, os.stat_result]]:
    """The regular files under ``root`` in name order with their ``lstat``, links neither
    followed nor packed."""
    out = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            p = Path(top) / name
            st = os.lstat(p)
            if name != ".filled" and stat.S_ISREG(st.st_mode):
                out.append((p, st))
    return sorted(out, key=lambda item: item[0])


def _links_inside(within: Path, wanted: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """How many names under ``within`` (links not followed) each file of ``wanted`` (by
    device and inode) has."""
    seen: dict[tuple[int, int], int] = dict.fromkeys(wanted, 0)
    for top, _dirs, files in os.walk(within):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    seen[key] += 1
    return seen


def _check_links(files: list[tuple[Path, os.stat_result]], cache_root: Path,
                 within: Path) -> None:
    """Refuse a file that has hard links outside ``within`` (the session)."""
    linked = {(st.st_dev, st.st_ino): (p, st.st_nlink) for p, st in files if st.st_nlink > 1}
    if not linked:
        return
    inside = _links_inside(within, set(linked))
    for key, (p, nlink) in sorted(linked.items(), key=lambda kv: kv[1][0]):
        if inside[key] < nlink:
            raise ColdscopeError(
                f"cannot pack {p.relative_to(cache_root)}: it is a hard link to a file outside "
                f"{within} ({nlink} links, {inside[key]} inside); a bundle packs only the "
                "session's own files")


def _add_file(tar: tarfile.TarFile, path: Path, walked: os.stat_result, arcname: str) -> None:
    """Add ``path`` from a descriptor opened without following links, if it is still the
    regular file that was walked (same device, inode and link count)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ColdscopeError(f"cannot pack {arcname}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (walked.st_dev,
                                                                          walked.st_ino)
                or st.st_nlink > walked.st_nlink):
            raise ColdscopeError(f"cannot pack {arcname}: it changed while the bundle was "
                                 "written; refused")
        info = tarfile.TarInfo(arcname)
        info.size = st.st_size
        info.mode = stat.S_IMODE(st.st_mode) & 0o755
        info.mtime = int(st.st_mtime)
        tar.addfile(info, fh)


def pack(cache_root: Path, output: Path, manifest: dict[str, Any], *,
         within: Path | None = None) -> dict[str, Any]:
    """Write ``output``: the manifest, then every regular file under ``cache_root`` as
    ``caches/...``; a file with hard links outside ``within`` (default ``cache_root``) is
    refused (see the module docstring). Written to a temporary file beside it and renamed over
    a regular file only (``safeio.atomic_path``), so a reader never sees half a bundle."""
    if not cache_root.is_dir():
        raise ColdscopeError(f"no caches to pack at {cache_root}")
    files = _regular_files(cache_root)
    _check_links(files, cache_root, within or cache_root)
    manifest = {**manifest, "files": len(files),
                "size_bytes": sum(st.st_size for _, st in files)}
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(output) as tmp, tarfile.open(tmp, "w:gz") as tar:
            data = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for p, st in files:
                _add_file(tar, p, st, f"caches/{p.relative_to(cache_root)}")
    except OSError as exc:
        raise ColdscopeError(f"cannot write {output}: {exc.strerror or exc}") from None
    return manifest


# -- reading a bundle --------------------------------------------------------------------------


def _bound(env: str, default: int) -> int:
    raw = os.environ.get(env)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ColdscopeError(f"{env} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ColdscopeError(f"{env} must be positive, got {raw!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds ``unpack`` holds a bundle to (see the module constants)."""

    max_bytes: int = MAX_BUNDLE_BYTES
    max_members: int = MAX_BUNDLE_MEMBERS

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, raised or lowered by ``COLDSCOPE_MAX_BUNDLE_BYTES`` and
        ``COLDSCOPE_MAX_BUNDLE_MEMBERS``."""
        return cls(max_bytes=_bound("COLDSCOPE_MAX_BUNDLE_BYTES", MAX_BUNDLE_BYTES),
                   max_members=_bound("COLDSCOPE_MAX_BUNDLE_MEMBERS", MAX_BUNDLE_MEMBERS))


class _Refused(Exception):
    """A rule the bundle breaks; the message completes "cannot unpack bundle X: ..."."""


class _NotABundle(Exception):
    """Not a gzip-compressed tar archive at all."""


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def _show(name: str) -> str:
    """A member name fit for a one-line message: quoted, escaped, at most ~80 characters."""
    return repr(name if len(name) <= 80 else name[:77] + "...")


def _word(value: object) -> str:
    """A manifest's name or version for a one-line message: as it is when it is one plain
    word (``0.32.0``, ``vllm``), else quoted and escaped as ``_show`` does."""
    text = str(value)
    return text if re.fullmatch(r"[\w.+-]{1,64}", text) else _show(text)


@dataclasses.dataclass(frozen=True)
class _Member:
    name: str
    kind: str  # "file" or "dir"
    size: int
    executable: bool


class _TarStream:
    """A ``.tar.gz`` read member by member, never seeking and never decompressing more than
    ``max_bytes`` in all: every read is checked against the bound before it is made.

    Header blocks are parsed by ``tarfile.TarInfo.frombuf`` (checksum, octal and base-256
    numbers, ustar prefixes); pax (``x``) and GNU long-name (``L``) headers are read here,
    with their own bound. Any other member type is refused by ``next``.
    """

    def __init__(self, fh: IO[bytes], max_bytes: int) -> None:
        self._gz = gzip.GzipFile(fileobj=fh, mode="rb")
        self._max = max_bytes
        self.consumed = 0  # uncompressed bytes read so far
        self._data_left = 0  # bytes of the current member's data not yet read
        self._pad_left = 0  # and of its padding to the next block

    def _read(self, n: int, *, eof_ok: bool = False) -> bytes:
        if self.consumed + n > self._max:
            raise _Refused(f"it expands to more than {self._max} bytes (raise the bound with "
                           "COLDSCOPE_MAX_BUNDLE_BYTES)")
        out = bytearray()
        while len(out) < n:
            chunk = self._gz.read(min(n - len(out), _CHUNK))
            if not chunk:
                if eof_ok and not out:
                    return b""
                raise _Refused("it is truncated (it ends inside a member)")
            out += chunk
        self.consumed += n
        return bytes(out)

    def _skip(self, n: int) -> None:
        while n > 0:
            step = min(n, _CHUNK)
            self._read(step)
            n -= step

    def read(self, n: int = _CHUNK) -> bytes:
        """Up to ``n`` bytes of the current member's data; b"" at its end."""
        n = min(n, self._data_left)
        if n <= 0:
            return b""
        data = self._read(n)
        self._data_left -= n
        return data

    def next(self) -> _Member | None:
        """The next member, checked for its type (regular file or directory only), or None
        at the end of the archive."""
        self._skip(self._data_left + self._pad_left)
        self._data_left = self._pad_left = 0
        pax: dict[str, str] = {}
        for _ in range(_MAX_EXTENSIONS + 1):
            buf = self._read(_BLOCK, eof_ok=True)
            if not buf or buf.count(0) == _BLOCK:
                return None  # end-of-archive block (or a missing one: tar stops there too)
            try:
                info = tarfile.TarInfo.frombuf(buf, "utf-8", "strict")
            except UnicodeDecodeError:
                raise _Refused("a member's name is not UTF-8") from None
            except tarfile.HeaderError as exc:
                raise _Refused(f"a member header is invalid ({exc})") from None
            if info.size < 0:
                raise _Refused(f"member {_show(info.name)} has a negative size")
            if info.type in (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME):
                if info.size > _MAX_EXTENSION_BYTES:
                    raise _Refused(f"an extended header of {info.size} bytes (at most "
                                   f"{_MAX_EXTENSION_BYTES})")
                payload = self._read(info.size)
                self._skip(-info.size % _BLOCK)
                if info.type == tarfile.XHDTYPE:
                    pax.update(_pax_records(payload))
                else:
                    pax["path"] = _decode(payload.split(b"\0", 1)[0])
                continue
            name = pax.get("path", info.name)
            size = info.size
            if "size" in pax:
                if not pax["size"].isdigit() or len(pax["size"]) > 20:
                    raise _Refused(f"member {_show(name)} has an invalid pax size")
                size = int(pax["size"])
            if any(k.startswith("GNU.sparse") for k in pax):
                raise _Refused(f"member {_show(name)} is a sparse file (only regular files "
                               "and directories)")
            if info.type == tarfile.DIRTYPE or \
                    (info.type == tarfile.AREGTYPE and name.endswith("/")):
                kind = "dir"
                name = name[:-1] if name.endswith("/") else name
                if size:
                    raise _Refused(f"member {_show(name)} is a directory with {size} bytes "
                                   "of data")
            elif info.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                kind = "file"
            else:
                what = _KINDS.get(info.type, f"of tar type {info.type!r}")
                raise _Refused(f"member {_show(name)} is {what} (only regular files and "
                               "directories)")
            self._data_left, self._pad_left = size, -size % _BLOCK
            return _Member(name, kind, size, bool(info.mode & 0o111))
        raise _Refused(f"a member has more than {_MAX_EXTENSIONS} extended headers")


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("a member's name is not UTF-8") from None


def _pax_records(payload: bytes) -> dict[str, str]:
    """The ``LENGTH key=value\\n`` records of a pax header."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(payload) and payload[pos] != 0:
        space = payload.find(b" ", pos, pos + 21)
        digits = payload[pos:space] if space > pos else b""
        length = int(digits) if digits.isdigit() else 0
        record = payload[pos:pos + length]
        if length <= len(digits) + 1 or pos + length > len(payload) or \
                not record.endswith(b"\n") or b"=" not in record:
            raise _Refused("a pax header is malformed")
        key, _, value = record[len(digits) + 1:-1].partition(b"=")
        out[_decode(key)] = _decode(value)
        pos += length
    return out


@contextlib.contextmanager
def _opened(bundle: Path, max_bytes: int) -> Iterator[_TarStream]:
    """The bundle as a ``_TarStream``; only a regular file is opened (a FIFO never blocks)."""
    with open_regular(bundle, "bundle") as fh:
        yield _TarStream(fh, max_bytes)


def _read_manifest(stream: _TarStream, bundle: Path) -> dict[str, Any]:
    first = stream.next()
    if first is None or first.name != MANIFEST or first.kind != "file":
        raise _NotABundle
    if first.size > MAX_MANIFEST_BYTES:
        raise _Refused(f"{MANIFEST} is {first.size} bytes (at most {MAX_MANIFEST_BYTES})")
    data = stream.read(first.size)
    try:
        manifest = loads_json(data.decode("utf-8"), f"{bundle} {MANIFEST}")
    except (UnicodeDecodeError, ColdscopeError):
        raise _NotABundle from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _NotABundle
    config = manifest.get("config")
    if isinstance(config, dict) and config.get("cache_key") is not None:
        try:
            plain_key(config["cache_key"], MANIFEST)
        except ColdscopeError as exc:
            raise _Refused(str(exc)) from None
    for section, fields in _SECTIONS.items():
        value = manifest.get(section)
        if value is None:
            continue
        if not isinstance(value, dict) or any(
                not isinstance(value.get(f), str | None) for f in fields):
            raise _Refused(f"{MANIFEST}: {section!r} is not as coldscope writes it")
        # these strings reach error lines on a terminal: no escape sequences
        if any(_has_control(value.get(f) or "") for f in fields):
            raise _Refused(f"{MANIFEST}: {section!r} has a control character")
    return manifest


@contextlib.contextmanager
def _refusals(bundle: Path) -> Iterator[None]:
    """Turn what goes wrong while reading a bundle into one line."""
    try:
        yield
    except _Refused as exc:
        raise ColdscopeError(f"cannot unpack bundle {bundle}: {exc}") from None
    except (_NotABundle, gzip.BadGzipFile, zlib.error):
        raise ColdscopeError(f"{bundle} is not a coldscope cache bundle ({FORMAT})") from None
    except EOFError:
        raise ColdscopeError(f"cannot unpack bundle {bundle}: it is truncated") from None
    except OSError as exc:
        raise ColdscopeError(f"cannot unpack bundle {bundle}: {exc.strerror or exc}") \
            from None


def read_manifest(bundle: Path) -> dict[str, Any]:
    """The bundle's manifest: its first member, at most ``MAX_MANIFEST_BYTES``, read without
    decompressing the rest."""
    headers = (_MAX_EXTENSIONS + 1) * (_MAX_EXTENSION_BYTES + 2 * _BLOCK)
    with _refusals(bundle), _opened(bundle, MAX_MANIFEST_BYTES + headers) as stream:
        return _read_manifest(stream, bundle)


def plain_key(key: Any, where: str) -> str:
    """``key`` if it is a plain cache key (letters, digits, ``_ . + -``; no ``/``, no ``..``,
    no NUL), else a one-line refusal."""
    if not isinstance(key, str) or not _PLAIN_KEY.fullmatch(key) or ".." in key:
        shown = _show(key) if isinstance(key, str) else type(key).__name__
        raise ColdscopeError(f"{where}: cache key {shown} is not a plain name (letters, "
                             "digits and _ . + - only)")
    return key


def check(manifest: dict[str, Any], *, engine: str, engine_version: str | None,
          torch: str | None, model_path: str | None, bundle: Path) -> None:
    """Refuse, with one line, a bundle whose caches cannot be valid here: made for another
    engine (``engine``: the adapter reading this command), another engine or torch version,
    or another model."""
    eng = manifest.get("engine") or {}
    made_for = eng.get("name")
    if isinstance(made_for, str) and made_for != engine:
        raise ColdscopeError(f"{bundle.name} was made for {_word(made_for)}, this command "
                             f"starts {engine}: refused (its caches would not match)")
    if engine_version and eng.get("version") and eng["version"] != engine_version:
        raise ColdscopeError(f"{bundle.name} was made for {engine} {_word(eng['version'])}, "
                             f"this is {engine} {engine_version}: refused (its caches would "
                             "not match)")
    if torch and eng.get("torch") and eng["torch"] != torch:
        raise ColdscopeError(f"{bundle.name} was made with torch {_word(eng['torch'])}, this "
                             f"is torch {torch}: refused (its caches would not match)")
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


def _relative(name: str) -> str | None:
    """The path below ``caches/`` a member extracts to, checked: relative, normalised, no
    control characters, bounded; None for ``caches/`` itself. Refuses anything else."""
    shown = _show(name)
    if name.startswith("/"):
        raise _Refused(f"member {shown} is an absolute path")
    if _has_control(name):
        raise _Refused(f"member {shown} has a control character in its name")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise _Refused(f"member {shown} has a name longer than {MAX_NAME_BYTES} bytes")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            which = f"a {part!r}" if part else "an empty"
            raise _Refused(f"member {shown} has {which} path component (only relative, "
                           "normalised paths)")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
            raise _Refused(f"member {shown} has a path component longer than "
                           f"{MAX_COMPONENT_BYTES} bytes")
    if parts[0] != "caches":
        raise _Refused(f"member {shown} is outside caches/ (a bundle holds {MANIFEST} and "
                       "caches/ only)")
    return "/".join(parts[1:]) or None


class _Extractor:
    """Writes checked members under a fresh directory ``root``: every directory it makes is
    checked to resolve to exactly where it should (no link anywhere on the way), files are
    created with ``O_EXCL | O_NOFOLLOW``, and a path is never written twice."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.seen: dict[str, str] = {}  # relative path -> "file" / "dir"

    def _dir(self, rel: str, member: str) -> str:
        path = os.path.join(self.root, rel)
        kind = self.seen.get(rel)
        if kind == "file":
            raise _Refused(f"member {_show(member)} is inside or is {_show(rel)}, already a "
                           "file")
        if kind is None:
            os.mkdir(path, 0o755)
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or os.path.realpath(path) != path:
                raise _Refused(f"member {_show(member)} resolves outside the destination")
            self.seen[rel] = "dir"
        return path

    def add(self, member: _Member, rel: str, stream: _TarStream) -> None:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            self._dir("/".join(parts[:i]), member.name)
        if member.kind == "dir":
            self._dir(rel, member.name)
            return
        if rel in self.seen:
            raise _Refused(f"member {_show(member.name)} appears twice")
        path = os.path.join(self.root, rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o755 if member.executable else 0o644)
        self.seen[rel] = "file"
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read():
                out.write(chunk)


def _make_dirs(path: Path) -> Path | None:
    """``mkdir -p path``; the topmost directory it made (None if it existed)."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    return missing[-1] if missing else None


def unpack(bundle: Path, dest: Path, limits: Limits | None = None) -> None:
    """Extract the bundle's caches as the cache root ``dest`` (replacing it), atomically.

    Every member is checked while the bundle is read, before a byte of it is written: the
    first is ``manifest.json`` (at most ``MAX_MANIFEST_BYTES``, with a plain cache key); the
    others are regular files and directories under ``caches/`` with relative, normalised
    names (no links, devices, FIFOs or sparse files; no absolute path, ``..``, empty
    component or control character), within ``limits`` (members, and uncompressed bytes both
    as declared and as decompressed). Refused: ``ColdscopeError`` with one line naming the
    member and the rule, and nothing extracted.
    """
    limits = limits or Limits.from_env()
    made = _make_dirs(dest.parent)
    tmp = Path(tempfile.mkdtemp(prefix=".bundle-", dir=dest.parent))
    ok = False
    try:
        with _refusals(bundle), _opened(bundle, limits.max_bytes) as stream:
            _read_manifest(stream, bundle)
            out = _Extractor(tmp)
            members = declared = 0
            while (member := stream.next()) is not None:
                members += 1
                if members > limits.max_members:
                    raise _Refused(f"it has more than {limits.max_members} members (raise the "
                                   "bound with COLDSCOPE_MAX_BUNDLE_MEMBERS)")
                declared += member.size
                if declared > limits.max_bytes:
                    raise _Refused(f"member {_show(member.name)} takes it past "
                                   f"{limits.max_bytes} bytes (raise the bound with "
                                   "COLDSCOPE_MAX_BUNDLE_BYTES)")
                rel = _relative(member.name)
                if rel is not None:
                    out.add(member, rel, stream)
                elif member.kind == "file":
                    raise _Refused(f"member {_show(member.name)} is a file (caches/ must be "
                                   "a directory)")
            if dest.is_symlink() or dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
            ok = True
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
        if not ok and made is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(made)


# -- with tune sessions and profile ------------------------------------------------------------


def _engine_of(argv: list[str]) -> Engine:
    from coldscope.engines import resolve
    return resolve(argv)


def _model_of(argv: list[str]) -> str | None:
    return _engine_of(argv).model(argv)


def _configurations(caches: Path) -> list[str]:
    """The configurations a session holds caches for: the plain directories under
    ``caches`` (links are not configurations)."""
    try:
        with os.scandir(caches) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []


def pack_session(directory: Path, output: Path, *,
                 cache_key: str | None = None) -> dict[str, Any]:
    """Pack the caches of a tune session's winner (or of ``cache_key``)."""
    from coldscope.tuning import session as ts
    from coldscope.tuning.report import best_command
    from coldscope.tuning.search import DEFAULT_KEY
    from coldscope.tuning.search import cache_key as key_of
    spec = ts.load(directory)
    by = {k.name: k for k in spec.knobs}
    if cache_key is None:
        if spec.outcome is None:
            raise ColdscopeError(f"tune session {spec.id} has not finished (use --resume, or "
                                 "name a configuration with --config)")
        knobs = list(spec.outcome.best_knobs)
        cache_key = key_of(knobs, by)
    else:
        plain_key(cache_key, "--config")
        knobs = cache_key.split("+") if cache_key != DEFAULT_KEY else []
        unknown = [k for k in knobs if k not in by]
        if unknown:
            raise ColdscopeError(f"--config {cache_key}: no such knob in session {spec.id}: "
                                 f"{', '.join(unknown)}")
    # only a configuration the session holds caches for, matched by name before any path
    # is made from it
    known = _configurations(directory / "caches")
    if cache_key not in known:
        raise ColdscopeError(f"session {spec.id} has no caches for {cache_key!r} "
                             f"(it has: {', '.join(known) or 'none'})")
    src = ts.archive_dir(directory, cache_key)
    real, session = os.path.realpath(src), os.path.realpath(directory)
    if not real.startswith(session.rstrip(os.sep) + os.sep):
        raise ColdscopeError(f"the caches of {cache_key!r} resolve to {real}, outside session "
                             f"{spec.id} ({session}); refused")
    argv, env = best_command(spec, knobs)
    caps = spec.capabilities
    manifest = build_manifest(
        engine=_engine_of(argv).name, engine_version=caps.get("version"),
        torch=caps.get("torch"), python=caps.get("python"), model_path=_model_of(argv),
        config={"cache_key": cache_key, "knobs": knobs, "argv": argv, "env": env,
                "tune_session": spec.id},
    )
    return pack(src, output, manifest, within=directory)


def unpack_for_session(bundle: Path, directory: Path, spec: SessionSpec) -> str:
    """Seed a new tune session from a bundle: its caches become the archive of the bundle's
    configuration, so the search starts that configuration seeded without priming it.
    Returns the configuration's cache key."""
    from coldscope.tuning import session as ts
    from coldscope.tuning.search import DEFAULT_KEY
    manifest = read_manifest(bundle)
    caps = spec.capabilities
    check(manifest, engine=_engine_of(spec.command).name, engine_version=caps.get("version"),
          torch=caps.get("torch"), model_path=_model_of(spec.command), bundle=bundle)
    key = plain_key((manifest.get("config") or {}).get("cache_key") or DEFAULT_KEY,
                    f"{bundle} {MANIFEST}")
    names = {k.name for k in spec.knobs}
    unknown = [k for k in key.split("+") if key != DEFAULT_KEY and k not in names]
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
    from coldscope.engines import distributions
    manifest = read_manifest(bundle)
    engine = _engine_of(argv)
    versions = engine_versions(engine_python, {engine.name: distributions(engine),
                                               "torch": ("torch",)})
    check(manifest, engine=engine.name, engine_version=versions.get(engine.name),
          torch=versions.get("torch"), model_path=_model_of(argv), bundle=bundle)
    unpack(bundle, dest)
    (dest / ".filled").touch()
    return manifest
