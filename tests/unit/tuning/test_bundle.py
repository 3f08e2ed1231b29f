"""Hostile cache bundles (issue 19): every archive is built in the test, byte by byte where
``tarfile`` would not write it. Whatever a bundle holds, nothing is written outside the
destination, and a refused bundle is one line and extracts nothing."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from coldscope.cli.main import main
from coldscope.tuning import bundle as tb
from coldscope.tuning import session as ts
from coldscope.util.errors import ColdscopeError
from tests.unit.tuning.test_search import cpu_knobs

KB = 1024
MB = 1024 * KB


def _manifest(key: str | None = "default", **extra) -> bytes:
    return json.dumps({"format": tb.FORMAT, "engine": {"name": "vllm", "version": "0.32.0"},
                       "config": {"cache_key": key}, **extra}).encode()


def _entry(name: str, data: bytes = b"", *, type=tarfile.REGTYPE, linkname: str = "",
           size: int | None = None, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = type
    info.linkname = linkname
    info.mode = mode
    info.size = len(data) if size is None else size
    return info, data


def _tar(entries, fmt=tarfile.PAX_FORMAT, manifest: bytes | None = None) -> bytes:
    """A tar stream written header by header, so that a declared size may lie."""
    out = bytearray()
    if manifest is None:
        manifest = _manifest()
    if manifest:
        entries = [_entry(tb.MANIFEST, manifest), *entries]
    for info, data in entries:
        out += info.tobuf(fmt, "utf-8", "surrogateescape")
        out += data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    return bytes(out + b"\0" * (2 * tarfile.BLOCKSIZE))


def _bundle(path: Path, entries, **kw) -> Path:
    path.write_bytes(gzip.compress(_tar(entries, **kw), compresslevel=1))
    return path


def _snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every path under ``root`` (but ``skip``'s subtree) with its type and content."""
    out = {}
    for top, dirs, files in os.walk(root):
        if skip is not None and Path(top) == skip:
            dirs[:] = []
            continue
        for name in dirs + files:
            p = Path(top) / name
            if skip is not None and p == skip:
                continue
            st_ = os.lstat(p)
            if stat.S_ISLNK(st_.st_mode):
                out[str(p)] = ("link", os.readlink(p))
            elif stat.S_ISREG(st_.st_mode):
                out[str(p)] = ("file", p.read_bytes(), st_.st_mtime_ns)
            else:
                out[str(p)] = ("other", stat.S_IFMT(st_.st_mode))
    return out


@pytest.fixture
def site(tmp_path):
    """A cache root ``dest`` already seeded, a file outside it, and a place for bundles."""
    dest = tmp_path / "root" / "cache"
    dest.mkdir(parents=True)
    (dest / "old").write_text("old caches")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "flag").write_text("secret")
    return dest, outside / "flag"


def _refused(bundle: Path, dest: Path, match: str, limits: tb.Limits | None = None) -> str:
    before = _snapshot(dest.parents[1])
    with pytest.raises(ColdscopeError) as info:
        tb.unpack(bundle, dest, limits)
    message = str(info.value)
    assert "\n" not in message
    assert match in message, message
    assert _snapshot(dest.parents[1]) == before  # nothing extracted, nothing left behind
    return message


# -- a good bundle ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_packed_bundle_round_trips(tmp_path, fmt):
    root = tmp_path / "cache"
    deep = root / "vllm" / "torch_compile_cache" / ("h" * 120) / "rank_0_0"
    deep.mkdir(parents=True)
    (deep / ("k" * 200 + ".py")).write_text("kernel")  # a name longer than ustar's 100
    (root / "triton").mkdir()
    (root / "triton" / "lib.so").write_bytes(b"\x7fELF" + bytes(range(256)))
    (root / "triton" / "lib.so").chmod(0o755)
    (root / "ünïcode").write_text("ok")
    (root / ".filled").touch()
    os.symlink("/etc/passwd", root / "link")  # never packed
    out = tmp_path / "b.tar.gz"
    if fmt == tarfile.PAX_FORMAT:
        manifest = tb.pack(root, out, {"format": tb.FORMAT, "config": {"cache_key": "default"}})
        assert manifest["files"] == 3
    else:  # a bundle another tar wrote, with GNU long names
        entries = [_entry("caches/" + str(p.relative_to(root)), p.read_bytes(),
                          mode=p.stat().st_mode & 0o777)
                   for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
                   and p.name != ".filled"]
        _bundle(out, entries, fmt=fmt)
    assert tb.read_manifest(out)["format"] == tb.FORMAT
    dest = tmp_path / "fresh" / "root"
    tb.unpack(out, dest)
    got = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert got == {str(deep.relative_to(root) / ("k" * 200 + ".py")): b"kernel",
                   "triton/lib.so": (root / "triton" / "lib.so").read_bytes(),
                   "ünïcode": b"ok"}
    assert os.stat(dest / "triton" / "lib.so").st_mode & 0o100
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert not list((tmp_path / "fresh").glob(".bundle-*"))


# -- one test per rule -------------------------------------------------------------------------


@pytest.mark.parametrize("entries, message", [
    ([_entry("caches/a", type=tarfile.SYMTYPE, linkname="/etc")],
     "member 'caches/a' is a symlink (only regular files and directories)"),
    ([_entry("caches/x", b"1"), _entry("caches/h", type=tarfile.LNKTYPE, linkname="caches/x")],
     "member 'caches/h' is a hardlink"),
    ([_entry("caches/d", type=tarfile.CHRTYPE)], "'caches/d' is a character device"),
    ([_entry("caches/d", type=tarfile.BLKTYPE)], "'caches/d' is a block device"),
    ([_entry("caches/f", type=tarfile.FIFOTYPE)], "'caches/f' is a FIFO"),
    ([_entry("caches/c", b"1", type=tarfile.CONTTYPE)], "'caches/c' is a contiguous file"),
    ([_entry("caches/g", b"9 path=x\n", type=tarfile.XGLTYPE)], "is a global pax header"),
    ([_entry("caches/../x", b"1")], "member 'caches/../x' has a '..' path component"),
    ([_entry("caches/a/../../x", b"1")], "has a '..' path component"),
    ([_entry("caches/./x", b"1")], "has a '.' path component"),
    ([_entry("caches//x", b"1")], "has an empty path component"),
    ([_entry("/etc/x", b"1")], "member '/etc/x' is an absolute path"),
    ([_entry("elsewhere/x", b"1")], "member 'elsewhere/x' is outside caches/"),
    ([_entry(tb.MANIFEST, b"{}")], "outside caches/"),
    ([_entry("caches/a\x1b]0;title\x07", b"1")], "has a control character in its name"),
    ([_entry("caches/" + "a/" * 600 + "x", b"1")], "has a name longer than 1024 bytes"),
    ([_entry("caches/" + "a" * 300, b"1")], "has a path component longer than 255 bytes"),
    ([_entry("caches/x", b"1"), _entry("caches/x", b"2")], "member 'caches/x' appears twice"),
    ([_entry("caches/x", b"1"), _entry("caches/x/y", b"2")], "already a file"),
    ([_entry("caches/x", b"1"), _entry("caches/x", type=tarfile.DIRTYPE)], "already a file"),
    ([_entry("caches/d", b"12", type=tarfile.DIRTYPE)], "is a directory with 2 bytes"),
    ([_entry("caches", b"12")], "member 'caches' is a file (caches/ must be a directory)"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_each_rule_is_one_line_and_extracts_nothing(tmp_path, site, entries, message):
    dest, flag = site
    bundle = _bundle(tmp_path / "b.tar.gz", [_entry("caches/ok", b"fine"), *entries])
    text = _refused(bundle, dest, message)
    assert text.startswith(f"cannot unpack bundle {bundle}: ")
    assert (dest / "old").read_text() == "old caches" and not (dest / "ok").exists()
    assert flag.read_text() == "secret"


def test_not_a_bundle_truncated_or_not_a_regular_file(tmp_path, site):
    dest, _ = site
    (tmp_path / "junk.tar.gz").write_bytes(b"not gzip at all")
    _refused(tmp_path / "junk.tar.gz", dest, "is not a coldscope cache bundle")
    raw = gzip.compress(_tar([_entry("caches/x", b"x" * 4000)]))
    (tmp_path / "cut.tar.gz").write_bytes(raw[: len(raw) // 2])
    _refused(tmp_path / "cut.tar.gz", dest, "truncated")
    no_manifest = _bundle(tmp_path / "nm.tar.gz", [_entry("caches/x", b"1")], manifest=b"")
    _refused(no_manifest, dest, "is not a coldscope cache bundle")
    os.mkfifo(tmp_path / "fifo.tar.gz")  # opening it must not block
    _refused(tmp_path / "fifo.tar.gz", dest, "a FIFO, not a regular file")
    with pytest.raises(ColdscopeError, match="a FIFO"):
        tb.read_manifest(tmp_path / "fifo.tar.gz")


# -- CVE-2025-4517: nested long names behind symlinks, a hardlink through them ----------------


def _realpath_overflow(extract_dir_len: int) -> list:
    """The CVE-2025-4517 archive (after CPython's test_realpath_limit_attack), under caches/:
    directories named so that resolving the last symlink overflows PATH_MAX, which
    ``filter="data"`` on Python < 3.11.13 then does not check; a hardlink through the chain
    to ``flag`` beside the extraction directory and a regular member written over that hardlink."""
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf("/", "PC_PATH_MAX") - extract_dir_len - 1)
                       // (len(steps) + 1))
    entries, path = [], ""
    for step in steps:
        entries.append(_entry(f"caches/{path}{component}", type=tarfile.DIRTYPE, mode=0o777))
        entries.append(_entry(f"caches/{path}{step}", type=tarfile.SYMTYPE,
                              linkname=component))
        path += component + "/"
    linkpath = "/".join(steps) + "/" + "l" * 254
    entries.append(_entry(f"caches/{linkpath}", type=tarfile.SYMTYPE,
                          linkname="/".join([".."] * len(steps))))
    entries.append(_entry("caches/escape", type=tarfile.SYMTYPE, linkname=f"{linkpath}/.."))
    entries.append(_entry("caches/flaglink", type=tarfile.LNKTYPE,
                          linkname="caches/escape/flag"))
    entries.append(_entry("caches/flaglink", b"overwrite"))
    return entries


def _old_unpack(bundle: Path, dest: Path) -> None:
    """How coldscope unpacked before issue 19: tarfile's filter="data"."""
    tmp = Path(tempfile.mkdtemp(prefix=".bundle-", dir=dest.parent))
    with tarfile.open(bundle, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("caches/")]
        for m in members:
            m.name = m.name[len("caches/"):]
            if m.type == tarfile.LNKTYPE:
                m.linkname = m.linkname[len("caches/"):]
        tar.extractall(tmp, members=[m for m in members if m.name], filter="data")


def test_realpath_overflow_escape_is_refused_and_outside_file_untouched(tmp_path):
    dest = tmp_path / "root" / "cache"
    dest.parent.mkdir(parents=True)
    # the extraction directory is a .bundle-XXXXXXXX sibling of dest; escape/ resolves to its
    # parent, where the file to overwrite is
    (dest.parent / "flag").write_text("secret")
    extract_dir_len = len(str(dest.parent)) + 1 + len(".bundle-") + 8
    bundle = _bundle(tmp_path / "cve.tar.gz", _realpath_overflow(extract_dir_len))
    _refused(bundle, dest, "is a symlink (only regular files and directories)")
    assert (dest.parent / "flag").read_text() == "secret"
    assert not dest.exists()

    if sys.version_info >= (3, 11, 13):
        return  # this tarfile resists the archive; the check below shows the archive is real
    with contextlib.suppress(OSError, KeyError):
        _old_unpack(bundle, dest)
    assert (dest.parent / "flag").read_text() == "overwrite"


# -- bounds ------------------------------------------------------------------------------------


class _Counting(io.RawIOBase):
    """A file that counts the bytes read from it (the compressed bundle)."""

    def __init__(self, fh):
        self.fh, self.read_bytes = fh, 0

    def readable(self):
        return True

    def readinto(self, b):
        n = self.fh.readinto(b)
        self.read_bytes += n or 0
        return n

    def close(self):
        self.fh.close()
        super().close()


@pytest.fixture
def counted(monkeypatch):
    seen = []
    real = tb.open_regular

    def spy(path, what="file"):
        fh = _Counting(real(path, what))
        seen.append(fh)
        return fh

    monkeypatch.setattr(tb, "open_regular", spy)
    return seen


def _zeros_bomb(path: Path, members: list[tuple[str, int]]) -> Path:
    """A .tar.gz of members of zeros, compressed while it is made (never held whole)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip wrapper
    zero = bytes(MB)
    with path.open("wb") as f:
        f.write(z.compress(_tar([])[:-2 * tarfile.BLOCKSIZE]))  # the manifest
        for name, size in members:
            f.write(z.compress(_entry(name, size=size)[0].tobuf(tarfile.PAX_FORMAT)))
            for left in range(size, 0, -MB):
                f.write(z.compress(zero[:min(left, MB)]))
            f.write(z.compress(b"\0" * (-size % tarfile.BLOCKSIZE)))
        f.write(z.compress(b"\0" * 2 * tarfile.BLOCKSIZE))
        f.write(z.flush())
    return path


def test_gzip_bomb_is_refused_while_reading(tmp_path, site, counted, monkeypatch):
    dest, _ = site
    # one member declaring 256 MiB of zeros (~250 KB compressed), against a bound of 16 MiB
    one = _zeros_bomb(tmp_path / "one.tar.gz", [("caches/zeros", 256 * MB)])
    size = one.stat().st_size
    assert size < MB
    _refused(one, dest, "member 'caches/zeros' takes it past 16777216 bytes "
             "(raise the bound with COLDSCOPE_MAX_BUNDLE_BYTES)", tb.Limits(max_bytes=16 * MB))
    assert counted[-1].read_bytes < size / 4  # stopped at the header
    # 64 members of 1 MiB each: the decompressed stream (headers included) reaches the bound,
    # set by the env, inside the 16th
    many = _zeros_bomb(tmp_path / "many.tar.gz", [(f"caches/z{i}", MB) for i in range(64)])
    monkeypatch.setenv("COLDSCOPE_MAX_BUNDLE_BYTES", str(16 * MB))
    _refused(many, dest, "it expands to more than 16777216 bytes (raise the bound with "
             "COLDSCOPE_MAX_BUNDLE_BYTES)")
    assert counted[-1].read_bytes < many.stat().st_size / 2  # 16 of 64 MiB, and buffers
    # headers alone (declared sizes all 0) are counted too: the decompressed stream is bounded
    empties = _bundle(tmp_path / "e.tar.gz", [_entry(f"caches/e{i}") for i in range(4000)])
    _refused(empties, dest, "it expands to more than 1048576 bytes",
             tb.Limits(max_bytes=MB))


def test_member_count_and_extended_headers_are_bounded(tmp_path, site, monkeypatch):
    dest, _ = site
    bundle = _bundle(tmp_path / "b.tar.gz", [_entry(f"caches/f{i}", b"x") for i in range(30)])
    monkeypatch.setenv("COLDSCOPE_MAX_BUNDLE_MEMBERS", "20")
    _refused(bundle, dest, "it has more than 20 members (raise the bound with "
             "COLDSCOPE_MAX_BUNDLE_MEMBERS)")
    monkeypatch.setenv("COLDSCOPE_MAX_BUNDLE_MEMBERS", "many")
    with pytest.raises(ColdscopeError, match="COLDSCOPE_MAX_BUNDLE_MEMBERS must be a whole"):
        tb.unpack(bundle, dest)
    monkeypatch.delenv("COLDSCOPE_MAX_BUNDLE_MEMBERS")
    # a pax header declaring 1 GiB of records is refused before it is read
    huge_pax = _entry("caches/p", type=tarfile.XHDTYPE, size=1 << 30)
    _refused(_bundle(tmp_path / "p.tar.gz", [huge_pax]), dest,
             "an extended header of 1073741824 bytes")
    chained = [_entry("././@PaxHeader", b"11 path=xy\n", type=tarfile.XHDTYPE)] * 4
    _refused(_bundle(tmp_path / "c.tar.gz", [*chained, _entry("caches/x", b"1")]), dest,
             "a member has more than 3 extended headers")
    bad = [_entry("././@PaxHeader", b"99 path=xy\n", type=tarfile.XHDTYPE)]
    _refused(_bundle(tmp_path / "m.tar.gz", [*bad, _entry("caches/x", b"1")]), dest,
             "a pax header is malformed")


def test_manifest_over_the_bound_is_refused_unread(tmp_path, site):
    dest, _ = site
    big = _manifest(padding=" " * (2 * MB))
    bundle = _bundle(tmp_path / "b.tar.gz", [_entry("caches/x", b"1")], manifest=big)
    message = f"manifest.json is {len(big)} bytes (at most 1048576)"
    with pytest.raises(ColdscopeError, match=re.escape(message)):
        tb.read_manifest(bundle)
    _refused(bundle, dest, message)
    # a declared 512 MiB manifest stops at its header, whatever follows
    liar = _bundle(tmp_path / "l.tar.gz", [_entry(tb.MANIFEST, b"{}", size=512 * MB)],
                   manifest=b"")
    with pytest.raises(ColdscopeError, match="manifest.json is 536870912 bytes"):
        tb.read_manifest(liar)
    for bad, said in [
            (b'{"format": "coldscope-bundle/1", "engine": ["x"]}',
             "manifest.json: 'engine' is not as coldscope writes it"),
            (_manifest(model={"sha256": 7}), "'model' is not as coldscope writes it"),
            (_manifest(engine={"version": "0.32\x1b]0;pwned\x07"}),
             "manifest.json: 'engine' has a control character"),
            (b"[1]" * 10, "is not a coldscope cache bundle"),
            (b"\xff", "is not a coldscope cache bundle")]:
        junk = _bundle(tmp_path / "j.tar.gz", [], manifest=bad)
        with pytest.raises(ColdscopeError, match=re.escape(said)):
            tb.read_manifest(junk)


@pytest.mark.parametrize("key", ["../../x", "a/b", "..", "x\0y", "", 7, "a" * 300])
def test_cache_key_must_be_a_plain_name(tmp_path, site, key):
    dest, _ = site
    bundle = _bundle(tmp_path / "b.tar.gz", [_entry("caches/x", b"1")],
                     manifest=_manifest(key=key))
    with pytest.raises(ColdscopeError, match="is not a plain name"):
        tb.read_manifest(bundle)
    _refused(bundle, dest, "is not a plain name")
    assert tb.plain_key("aot_compile_off+multiprocessing_off", "x")


def test_session_refuses_a_bundle_whose_key_climbs_out(tmp_path):
    bundle = _bundle(tmp_path / "b.tar.gz", [_entry("caches/x", b"1")],
                     manifest=_manifest(key="../../../outside"))
    spec = ts.SessionSpec(id="tune-x", created_at="2026-01-01T00:00:00Z",
                          command=["python", "-m", "vllm.fake"], budget=3, knobs=cpu_knobs())
    with pytest.raises(ColdscopeError, match="not a plain name"):
        tb.unpack_for_session(bundle, tmp_path / "session", spec)
    assert not (tmp_path / "session").exists() and not (tmp_path / "outside").exists()


def _session(tmp_path) -> Path:
    spec = ts.SessionSpec(id="tune-x", created_at="2026-01-01T00:00:00Z",
                          command=["python", "-m", "vllm.entrypoints.openai.api_server",
                                   "--model", "org/tiny"], budget=3, knobs=cpu_knobs())
    d = tmp_path / "tune" / "tune-x"
    ts.save(spec, d)
    (d / "caches" / "default" / "vllm").mkdir(parents=True)
    (d / "caches" / "default" / "vllm" / "x").write_text("compiled")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_text("secret")
    os.symlink(tmp_path / "elsewhere", d / "caches" / "enforce_eager")  # a link, not caches
    return d


@pytest.mark.parametrize("config, message", [
    ("../../../elsewhere", "is not a plain name"),
    ("enforce_eager", "has no caches for 'enforce_eager' (it has: default)"),
    ("multiprocessing_off", "has no caches for 'multiprocessing_off' (it has: default)"),
    ("no_such_knob", "no such knob in session tune-x: no_such_knob"),
])
def test_bundle_config_takes_only_configurations_the_session_holds(tmp_path, capsys, config,
                                                                   message):
    _session(tmp_path)
    out = tmp_path / "b.tar.gz"
    code = main(["bundle", "--store", str(tmp_path / "s.db"), "--config", config,
                 "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_bundle_config_default_packs(tmp_path, capsys):
    _session(tmp_path)
    out = tmp_path / "b.tar.gz"
    code = main(["bundle", "--store", str(tmp_path / "s.db"), "--config", "default",
                 "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    with tarfile.open(out) as tar:
        assert tar.getnames() == [tb.MANIFEST, "caches/vllm/x"]


@pytest.mark.parametrize("target", ["fifo", "socket", "directory"])
def test_bundle_output_must_be_a_regular_file(tmp_path, capsys, target):
    from tests.unit.util.test_safeio import special_file

    _session(tmp_path)
    out = special_file(tmp_path, target)
    before = os.stat(out)
    code = main(["bundle", "--store", str(tmp_path / "s.db"), "--config", "default",
                 "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    # a directory is already refused by click's dir_okay=False
    said = "is a directory" if target == "directory" else f"cannot write {out}: it exists and is"
    assert said in err and len(err.strip().splitlines()) == 1
    after = os.stat(out)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert not list(tmp_path.glob(".out*"))


# -- the fuzz ----------------------------------------------------------------------------------

_SAFE = [tarfile.REGTYPE] * 8 + [tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.DIRTYPE]
_HOSTILE = [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE,
            tarfile.FIFOTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE]
_PARTS = ["a", "b", "c"] * 6 + ["..", ".", "", "caches", "d" * 120, "e" * 256, "ü", "x\x1b"]


@st.composite
def _members(draw, outside: str, calm: bool):
    """A member: plausible when ``calm``; else with a chance of being hostile in one or more
    ways: its type, its name, its link target, its declared size."""
    if calm:
        parts = draw(st.lists(st.sampled_from(["a", "b", "c", "d" * 120, "ü"]), max_size=3))
        kind = draw(st.sampled_from(_SAFE))
        if kind == tarfile.DIRTYPE:
            data = b""
            parts = parts or ["a"]
        else:  # files end in a leaf no directory has
            data = draw(st.binary(max_size=40))
            parts = [*parts, f"f{draw(st.integers(0, 99))}"]
        return _entry("caches/" + "/".join(parts), data, type=kind,
                      mode=draw(st.sampled_from([0o644, 0o755, 0o4777, 0o000])))
    parts = draw(st.lists(st.sampled_from(_PARTS), min_size=1, max_size=4))
    prefix = draw(st.sampled_from(["caches/"] * 12 + ["/", "", "caches/../", "/caches/"]))
    name = prefix + "/".join(parts)
    kind = draw(st.sampled_from(_SAFE + _HOSTILE * 2))
    link = draw(st.sampled_from(["", "..", "../../outside/flag", outside, outside + "/flag",
                                 "caches/a", "a", "caches/escape/flag", "/" + "l" * 300]))
    if kind not in _HOSTILE and draw(st.integers(0, 9)):
        link = ""
    data = b"" if kind == tarfile.DIRTYPE and draw(st.integers(0, 9)) else \
        draw(st.binary(max_size=40))
    size = draw(st.sampled_from([None] * 12 + [0, 1 << 40, len(data) + 700]))
    return _entry(name, data, type=kind, linkname=link, size=size,
                  mode=draw(st.sampled_from([0o644, 0o755, 0o4777, 0o000])))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), fmt=st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]),
       with_manifest=st.sampled_from([True] * 7 + [False]))
def test_fuzzed_bundles_never_write_outside_and_refusals_extract_nothing(data, fmt,
                                                                        with_manifest):
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = Path(tmp)
        outside = sandbox / "outside"
        outside.mkdir()
        (outside / "flag").write_text("secret")
        dest = sandbox / "root" / "cache"
        dest.mkdir(parents=True)
        (dest / "old").write_text("old caches")
        # plausible members with, in one example of two, a few wild ones among them
        entries = data.draw(st.lists(_members(str(outside), calm=True), max_size=12,
                                     unique_by=lambda e: e[0].name))
        for _ in range(data.draw(st.sampled_from([0, 0, 1, 3]))):
            wild = data.draw(_members(str(outside), calm=False))
            entries.insert(data.draw(st.integers(0, len(entries))), wild)
        try:
            raw = _tar(entries, fmt=fmt, manifest=None if with_manifest else b"")
        except (ValueError, tarfile.HeaderError):
            assume(False)  # tarfile cannot write this header in this format
        (sandbox / "b.tar.gz").write_bytes(gzip.compress(raw, compresslevel=1))
        before = _snapshot(sandbox, skip=dest)
        old_dest = _snapshot(dest)
        try:
            tb.unpack(sandbox / "b.tar.gz", dest, tb.Limits(max_bytes=64 * KB, max_members=12))
        except ColdscopeError as exc:
            assert "\n" not in str(exc)
            assert _snapshot(dest) == old_dest  # refused: the old cache root as it was
            accepted = False
            event("refused: " + re.sub(r"'.*'|\d+", "_", str(exc).partition(": ")[2])[:60])
        else:
            accepted = True
            event("accepted")
        assert _snapshot(sandbox, skip=dest) == before  # nothing outside written or left
        if not accepted:
            return
        # accepted: plain files and directories under dest; exactly the regular members when
        # every declared size was honest (else the data runs into the next header, as in tar)
        exact = all(info.size == len(body) for info, body in entries)
        want = {}
        for info, body in entries:
            if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and not info.name.endswith("/"):
                want[info.name[len("caches/"):]] = body
        for p in dest.rglob("*"):
            mode = os.lstat(p).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), p
            assert os.path.realpath(p).startswith(os.path.realpath(dest) + os.sep)
            assert not mode & (stat.S_ISUID | stat.S_ISGID | 0o022)
        got = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*")
               if p.is_file()}
        assert got == want or not exact
        shutil.rmtree(dest)
