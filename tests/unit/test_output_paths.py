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
from coldscope.util.safeio import check_output_target
from tests.unit.test_bundle_safety import _session
from tests.unit.test_export import run as export_run
from tests.unit.test_trace_export import messy_run


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
    from tests.unit.test_calibrate import MODELS, _machine

    model = StartupModel(formulas={"model_loading": ("weight_gb",), "tokenizer": ("1",)})
    model.fit(_machine(2.0, 0.3, 5.0, MODELS), {}, {})
    model.save(t / "base.json")
    return str(t / "base.json")


def _tune_store(t: Path) -> str:
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


def test_device_nodes_are_refused_by_the_check():
    # only stat()ed: safe whatever happens
    with pytest.raises(ColdscopeError, match="cannot write /dev/null: it exists and is a "
                       "character device, not a regular file"):
        check_output_target("/dev/null")


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
