"""Hostile stores and the files beside them (issue 31): a store, a ``-wal``/``-journal``/
``-shm`` companion, a lock or a file input that is a FIFO, a device, a link into ``/proc`` or
``/sys``, or a name with a NUL is refused with one line (exit 2 for the CLI) before anything
opens it: no command waits on a FIFO, no SQLite error escapes as a traceback, and the runs
already stored are all still there afterwards."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from coldscope.cli.main import main
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError
from coldscope.util.safeio import check_regular, open_lock, read_bytes
from tests.conftest import platform_skip
from tests.unit.export.test_table import run

#: A generous bound that tells a refusal from a hang (a FIFO open waits forever).
HANG_S = 10.0


def _store(path: Path) -> Path:
    with Store(path) as s:
        s.add_run(run("e1"))
        s.add_run(run("e2", label="other"))
    return path


@contextlib.contextmanager
def _unblocked_after(seconds: float, fifo: Path):
    """Should a regression open ``fifo`` for reading (which waits for a writer), a writer
    comes after ``seconds`` and goes at once, so the test fails instead of hanging."""
    stop = threading.Event()

    def write():
        if stop.wait(seconds):
            return
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


#: Every read-only command that opens the store, with the store given as ``--store``.
READERS = {
    "runs": lambda s: ["runs", "--store", s],
    "show": lambda s: ["show", "e1", "--store", s],
    "export": lambda s: ["export", "-o", str(Path(s).parent / "x.csv"), "--store", s],
    "report": lambda s: ["report", "-o", str(Path(s).parent / "r.html"), "--store", s],
    "compare": lambda s: ["compare", "--runs-a", "t", "--runs-b", "other", "--store", s],
}


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_fifo_store_is_refused_at_once(tmp_path, capsys, command):
    fifo = tmp_path / "store.db"
    os.mkfifo(fifo)
    start = time.monotonic()
    with _unblocked_after(HANG_S, fifo):
        code = main(READERS[command](str(fifo)))
    assert time.monotonic() - start < HANG_S
    err = _one_line(capsys)
    assert code == 2
    assert f"cannot open store {fifo}: it is a FIFO, not a regular file" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # left as it was


def test_a_fifo_named_by_coldscope_store_is_refused(tmp_path, capsys, monkeypatch):
    fifo = tmp_path / "store.db"
    os.mkfifo(fifo)
    monkeypatch.setenv("COLDSCOPE_STORE", str(fifo))
    with _unblocked_after(HANG_S, fifo):
        code = main(["runs"])
    assert code == 2
    assert "it is a FIFO, not a regular file" in _one_line(capsys)


def _plant(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        path.mkdir()
    else:  # a link to a regular file: SQLite would write through it
        (path.parent / "elsewhere").write_bytes(b"not a journal")
        os.symlink(path.parent / "elsewhere", path)


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory", "link"])
@pytest.mark.parametrize("suffix", ["-wal", "-journal", "-shm"])
def test_a_hostile_companion_is_refused_and_the_runs_survive(tmp_path, capsys, suffix, kind):
    store = _store(tmp_path / "s.db")
    companion = Path(f"{store}{suffix}")
    _plant(companion, kind)
    what = {"fifo": "it is a FIFO", "zero": "it is a symbolic link", "link": "it is a symbolic "
            "link", "directory": "it is a directory"}[kind]
    with _unblocked_after(HANG_S, companion) if kind == "fifo" else contextlib.nullcontext():
        code = main(["runs", "--store", str(store)])  # read-only
        assert code == 2
        assert f"cannot open store file {companion}: {what}" in _one_line(capsys)
        with pytest.raises(ColdscopeError, match=f"cannot open store file {companion}: {what}"):
            Store(store).add_run(run("e3"))  # writable: was a sqlite 'disk I/O error' traceback
    if kind == "directory":
        companion.rmdir()
    else:
        companion.unlink()
    with Store(store, create=False) as s:
        assert [r.id for r in s.runs()] == ["e1", "e2"]
    if kind == "link":
        assert (tmp_path / "elsewhere").read_bytes() == b"not a journal"


def test_companions_beside_the_file_a_store_link_leads_to_are_checked(tmp_path, capsys):
    """SQLite keeps the companions beside the file a linked store leads to: those are the
    ones checked."""
    (tmp_path / "data").mkdir()
    real = _store(tmp_path / "data" / "real.db")
    link = tmp_path / "s.db"
    os.symlink(real, link)
    assert main(["runs", "--store", str(link)]) == 0
    capsys.readouterr()
    wal = Path(f"{real}-wal")
    if wal.exists():  # an empty one a read-only open leaves
        assert wal.stat().st_size == 0
        wal.unlink()
    os.mkfifo(wal)
    with _unblocked_after(HANG_S, Path(f"{real}-wal")):
        assert main(["runs", "--store", str(link)]) == 2
    assert f"cannot open store file {real}-wal: it is a FIFO" in _one_line(capsys)


@pytest.mark.parametrize("name", ["/proc/self/status",
                                  "/sys/kernel/mm/transparent_hugepage/enabled",
                                  "/dev/null", "/dev/zero"])
def test_pseudo_files_and_devices_are_not_stores(capsys, name):
    if not os.path.exists(name):
        platform_skip(f"{name} (not on this machine)")
    code = main(["runs", "--store", name])
    err = _one_line(capsys)
    assert code == 2
    assert f"cannot open store {name}:" in err


def test_a_link_to_a_proc_file_is_not_a_store(tmp_path, capsys):
    link = tmp_path / "s.db"
    os.symlink("/proc/self/environ", link)
    assert main(["runs", "--store", str(link)]) == 2
    assert "/proc or /sys pseudo file systems" in _one_line(capsys)


def test_a_nul_in_a_store_path_is_one_line():
    for create in (True, False):
        with pytest.raises(ColdscopeError, match="a path cannot hold a NUL byte"):
            Store("s\0.db", create=create)


def test_a_store_still_opens_and_writes_after_all_the_checks(tmp_path):
    """The checks refuse nothing real: a new store, a WAL store with its companions present
    while another connection holds it open, a store behind a link."""
    store = _store(tmp_path / "s.db")
    with Store(store) as holder:  # keeps -wal and -shm in place
        assert Path(f"{store}-wal").exists()
        with Store(store) as second:
            second.add_run(run("e3"))
        assert holder.count() == 3
    os.symlink(store, tmp_path / "link.db")
    with Store(tmp_path / "link.db", create=False) as s:
        assert s.count() == 3


# -- the file checks themselves ----------------------------------------------------------------


def test_check_regular_never_opens(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ColdscopeError, match="it is a FIFO, not a regular file"):
        check_regular(fifo, "marker")
    assert check_regular(tmp_path / "absent") is None
    (tmp_path / "file").write_text("x")
    assert check_regular(tmp_path / "file").st_size == 1
    os.symlink(tmp_path / "file", tmp_path / "link")
    assert check_regular(tmp_path / "link").st_size == 1  # followed
    with pytest.raises(ColdscopeError, match="it is a symbolic link, not a regular file"):
        check_regular(tmp_path / "link", follow=False)


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory", "link"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    lock = tmp_path / "x.lock"
    _plant(lock, kind)
    with pytest.raises(ColdscopeError, match=f"cannot open lock file {lock}: it is "):
        open_lock(lock)


def test_a_lock_file_is_made_and_reused(tmp_path):
    lock = tmp_path / "x.lock"
    for _ in range(2):
        fd = open_lock(lock)
        try:
            assert stat.S_ISREG(os.fstat(fd).st_mode)
        finally:
            os.close(fd)


@pytest.mark.parametrize("target", ["/proc/self/status", "/proc/self/cmdline",
                                    "/sys/kernel/mm/transparent_hugepage/enabled"])
def test_file_inputs_refuse_proc_and_sys(tmp_path, target):
    """A "regular" file of /proc or /sys can block (/proc/kmsg) or never end: no input is
    one, named or behind a link."""
    if not os.path.exists(target):
        platform_skip(f"{target} (not on this machine)")
    link = tmp_path / "input.json"
    os.symlink(target, link)
    for name in (target, link):
        with pytest.raises(ColdscopeError, match="/proc or /sys pseudo file systems"):
            read_bytes(name, what="input")


def test_a_nul_in_an_input_path_is_one_line():
    import coldscope

    with pytest.raises(ColdscopeError, match="a path cannot hold a NUL byte"):
        read_bytes("a\0b")
    with pytest.raises(ColdscopeError, match="a path cannot hold a NUL byte"):
        coldscope.predict("model\0.json", "/m")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_campaign_lock_beside_the_store_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    """The campaign's lock file beside the store: a FIFO or a link to /dev/zero planted under
    its name used to end in an OSError traceback (ftruncate); now one line."""
    import hashlib

    from coldscope.campaign.execute import campaign_lock
    from coldscope.campaign.spec import parse_spec
    from tests.unit.campaign.test_local import fake_spec

    store = _store(tmp_path / "s.db")
    spec = parse_spec(fake_spec(tmp_path, repetitions=1))
    key = hashlib.sha256(spec.name.encode()).hexdigest()[:12]  # how the lock is named
    _plant(tmp_path / f".s.db.campaign-{key}.lock", kind)
    with pytest.raises(ColdscopeError, match="cannot open campaign lock file .* it is a"), \
            campaign_lock(spec, store):
        pass
