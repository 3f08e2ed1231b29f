"""Standby launchers on the fake engine (tests/fake_engine.py) and on made modules: the
launcher's process handling, its refusals, and the runner starting an engine through it.
The real vLLM through a launcher is tests/integration/launch/test_standby.py."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from coldscope.launch import standby
from coldscope.launch.runner import RunConfig, config_key, run_once
from coldscope.util.errors import ColdscopeError
from tests.conftest import process_gone
from tests.serve_replay import free_port

FAKE = str(Path(__file__).resolve().parents[2] / "fake_engine.py")


@pytest.fixture
def root(tmp_path):
    """A launchers' directory whose launchers are all stopped at the end."""
    where = tmp_path / "sb"
    yield where
    for launcher in standby.listing(root=where):
        if launcher.status in ("ready", "importing"):
            standby.stop(launcher.name, root=where)




# -- what a launcher runs ------------------------------------------------------------------


def test_entry_of_reads_module_script_and_console_script(tmp_path):
    assert standby.entry_of(["python", "-m", "pkg.mod", "--x", "1"]) == standby.Entry(
        os.path.join(os.path.dirname(sys.executable), "python"), "module", "pkg.mod",
        ("--x", "1"))
    entry = standby.entry_of([sys.executable, FAKE, "--port", "1"])
    assert (entry.kind, entry.target, entry.args) == ("path", FAKE, ("--port", "1"))
    # a console script: a file whose first line runs this interpreter
    script = tmp_path / "serve-it"
    script.write_text(f"#!{sys.executable}\nprint('hi')\n")
    script.chmod(0o755)
    entry = standby.entry_of([str(script), "--a"])
    assert (entry.python, entry.kind, entry.target, entry.args) == (
        sys.executable, "path", str(script), ("--a",))
    with pytest.raises(ColdscopeError, match="not a Python program"):
        standby.entry_of(["/bin/sh", "-c", "true"])
    with pytest.raises(ColdscopeError, match="runs `python -m MODULE"):
        standby.entry_of(["python", "-c", "print(1)"])
    with pytest.raises(ColdscopeError, match="command not found"):
        standby.entry_of(["no-such-program-here"])


@pytest.mark.parametrize("name", ["", "-x", "a/b", "a b", "x" * 65, "..", "ok\n"])
def test_bad_names_are_refused(name, root):
    with pytest.raises(ColdscopeError, match="standby name"):
        standby.start(name, [sys.executable, FAKE], root=root)


def test_config_key_changes_only_with_a_standby():
    argv = [sys.executable, FAKE, "--port", "9"]
    plain = RunConfig(command=argv, env={"A": "1"})
    # the key as it was before launchers existed: sha256 of the sorted JSON of command and env
    before = hashlib.sha256(json.dumps({"command": argv, "env": {"A": "1"}},
                                       sort_keys=True).encode()).hexdigest()[:16]
    assert config_key(plain) == before
    assert config_key(plain.model_copy(update={"standby": "x"})) != before


# -- a launcher's life -----------------------------------------------------------------------


def test_start_status_launch_and_stop(root, tmp_path):
    launcher = standby.start("fake", [sys.executable, FAKE], root=root)
    assert launcher.status == "ready" and launcher.python == sys.executable
    assert launcher.rss_bytes and launcher.uss_bytes and launcher.uss_bytes <= launcher.rss_bytes
    (listed,) = standby.listing(root=root)
    assert (listed.name, listed.pid) == ("fake", launcher.pid)
    # the launcher is in its own session, and so is each engine it forks
    assert os.getsid(launcher.pid) == launcher.pid
    port = free_port()
    env = {**os.environ, "MARK": "from-the-request"}
    child = standby.launch("fake", [sys.executable, FAKE, "--port", str(port), "--delay", "0"],
                           env, str(tmp_path), root=root)
    proc = psutil.Process(child.pid)
    assert proc.ppid() == launcher.pid and os.getsid(child.pid) == child.pid
    assert proc.cwd() == str(tmp_path)
    assert child.stdout.readline() == b"fake engine starting\n"
    assert child.poll() is None
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(timeout=10) == -signal.SIGTERM
    standby.stop("fake", root=root)
    assert process_gone(launcher.pid, 10)
    assert standby.find("fake", root=root) is None


def test_a_second_launcher_of_one_name_is_refused(root):
    standby.start("one", [sys.executable, FAKE], root=root)
    with pytest.raises(ColdscopeError, match="already running"):
        standby.start("one", [sys.executable, FAKE], root=root)


def test_the_engine_stops_when_its_requester_goes_away(root, tmp_path):
    standby.start("fake", [sys.executable, FAKE], root=root)
    child = standby.launch("fake", [sys.executable, FAKE, "--port", str(free_port()),
                                    "--mode", "hang"], dict(os.environ), str(tmp_path),
                           root=root)
    assert child.stdout.readline() == b"fake engine starting\n"
    child.close()  # as if coldscope died: the launcher stops the engine's group
    assert process_gone(child.pid, 15)


_OWNER = """
import sys
from pathlib import Path
from coldscope.launch import standby
launcher = standby.start("owned", [sys.executable, sys.argv[1]], root=Path(sys.argv[2]),
                         die_with_parent={die})
print(launcher.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""


@pytest.mark.parametrize("die", [True, False])
def test_a_launcher_owned_by_a_command_stops_when_it_is_killed(root, tmp_path, die):
    """tune's session launcher (``die_with_parent``) goes with a tune killed by SIGKILL, its
    engine with it; ``standby start``'s stays."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER.format(die=die), FAKE, str(root)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[3])
    try:
        pid = int(owner.stdout.readline())
        child = standby.launch("owned", [sys.executable, FAKE, "--port", str(free_port()),
                                         "--mode", "hang"], dict(os.environ), str(tmp_path),
                               root=root)
        assert child.stdout.readline() == b"fake engine starting\n"
        owner.kill()
        owner.wait()
        time.sleep(1.0)  # five turns of the launcher's loop
        assert process_gone(pid, 10 if die else 1) is die
        if die:
            assert process_gone(child.pid, 15)
            left = standby.find("owned", root=root)
            assert left.status == "stopped" and "owner" in left.reason
        else:
            assert psutil.Process(pid).is_running() and child.poll() is None
            child.close()
    finally:
        owner.kill()
        owner.wait()


def test_exit_status_and_output_come_back(root, tmp_path):
    standby.start("fake", [sys.executable, FAKE], root=root)
    child = standby.launch("fake", [sys.executable, FAKE, "--mode", "exit"], dict(os.environ),
                           str(tmp_path), root=root)
    assert child.wait(timeout=20) == 3
    assert child.stdout.read().decode().splitlines() == ["fake engine starting",
                                                         "fatal: cannot load model"]


def test_another_interpreter_is_refused(root, tmp_path):
    standby.start("fake", [sys.executable, FAKE], root=root)
    other = tmp_path / "python3.99"
    other.symlink_to("/bin/true")
    with pytest.raises(ColdscopeError, match="start a standby for its environment"):
        standby.launch("fake", [str(other), FAKE], dict(os.environ), str(tmp_path), root=root)


def test_a_missing_launcher_is_a_clear_error(root, tmp_path):
    with pytest.raises(ColdscopeError, match="no standby named 'nope'"):
        standby.launch("nope", [sys.executable, FAKE], {}, str(tmp_path), root=root)
    with pytest.raises(ColdscopeError, match="no standby named 'nope'"):
        standby.stop("nope", root=root)


# -- refusals: a changed environment, a device initialised -----------------------------------


def test_a_changed_module_file_refuses_the_launch(root, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    mod = lib / "cs_standby_made.py"
    mod.write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(lib))
    launcher = standby.start("fake", [sys.executable, FAKE], root=root,
                             preload=["cs_standby_made"])
    assert [i["module"] for i in launcher.imports] == ["cs_standby_made"]
    mod.write_text("VALUE = 22\n")  # an upgrade in place: another size
    with pytest.raises(ColdscopeError, match=r"cs_standby_made\.py changed"):
        standby.launch("fake", [sys.executable, FAKE], dict(os.environ), str(tmp_path),
                       root=root)


def test_a_module_that_initialises_cuda_is_refused(root, tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    (lib / "torch").mkdir(parents=True)
    # a stand-in torch whose import initialises CUDA (as a careless import could)
    (lib / "torch" / "__init__.py").write_text(
        "class cuda:\n    @staticmethod\n    def is_initialized():\n        return True\n")
    monkeypatch.setenv("PYTHONPATH", str(lib))
    with pytest.raises(ColdscopeError, match="torch.cuda was initialised by the imports"):
        standby.start("fake", [sys.executable, FAKE], root=root, preload=["torch"])


def test_a_module_that_fails_to_import_is_recorded_not_fatal(root):
    launcher = standby.start("fake", [sys.executable, FAKE], root=root,
                             preload=["cs_no_such_module_anywhere", "json"])
    by_name = {i["module"]: i for i in launcher.imports}
    assert "ModuleNotFoundError" in by_name["cs_no_such_module_anywhere"]["error"]
    assert "error" not in by_name["json"]


# -- the runner through a launcher ------------------------------------------------------------


def test_a_run_through_a_launcher(root, tmp_path):
    standby.start("fake", [sys.executable, FAKE], root=root)
    port = free_port()
    config = RunConfig(command=[sys.executable, FAKE, "--port", str(port), "--delay", "0.2"],
                       cache_root=tmp_path / "caches", spans=False, shutdown_grace=2,
                       standby="fake", standby_dir=root)
    record, evidence = run_once(config)
    assert record.status == "ok", record.reason
    assert any("launched through standby 'fake'" in n for n in record.notes)
    assert any("startup complete" in text for _, text in evidence["log"])
    # the probe recorded in the forked child: its process event, its pid the launch's root
    (process,) = [e for e in evidence["probe"] if e["ev"] == "process"]
    assert process["pid"] == evidence["launch"]["root_pid"]
    assert process["ppid"] == standby.find("fake", root=root).pid
    assert process_gone(evidence["launch"]["root_pid"], 10)


def test_a_run_through_a_stopped_launcher_fails_before_it_starts(root, tmp_path):
    config = RunConfig(command=[sys.executable, FAKE], cache_root=tmp_path / "caches",
                       standby="absent", standby_dir=root)
    with pytest.raises(ColdscopeError, match="no standby named 'absent'"):
        run_once(config)


def test_cli_start_status_stop(root):
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coldscope.cli.main", "standby", *args],
                              capture_output=True, text=True, timeout=120)

    done = cli("start", "fake", "--dir", str(root), "--", sys.executable, FAKE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("standby fake: ready (pid ")
    status = cli("status", "--dir", str(root), "--json")
    (doc,) = json.loads(status.stdout)["standby"]
    assert (doc["name"], doc["status"], doc["command"]) == ("fake", "ready",
                                                           [sys.executable, FAKE])
    again = cli("start", "fake", "--dir", str(root), "--", sys.executable, FAKE)
    assert again.returncode != 0 and "already running" in again.stderr
    assert "Traceback" not in again.stderr
    assert cli("stop", "fake", "--dir", str(root)).returncode == 0
    assert process_gone(doc["pid"], 10)
    missing = cli("stop", "fake", "--dir", str(root))
    assert missing.returncode != 0 and "no standby named 'fake'" in missing.stderr


def test_the_hook_s_launcher_env_is_in_place_before_the_imports(tmp_path):
    """A hook whose ``launcher_env`` asks for a variable (vLLM CPU: the ``LD_PRELOAD`` its
    spawned processes get, which only takes effect at exec) makes the launcher execute itself
    again with it, once, before it imports anything: the launcher's initial environment
    (``/proc/PID/environ``, what ``exec`` gave it) holds it, under the same pid."""
    hook = tmp_path / "hook.py"
    hook.write_text("def launcher_env(environ):\n"
                    "    return {'CS_LAUNCHER_MARK': 'from-the-hook'}\n")
    sock, state = tmp_path / "l.sock", tmp_path / "l.json"
    proc = subprocess.Popen([sys.executable, str(standby.SERVER), "--name", "x", "--socket",
                             str(sock), "--state", str(state), "--module", "json",
                             "--hook", str(hook)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (state.exists() and json.loads(state.read_text()).get("status") == "ready"):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        # one process: the same pid, executed again with the variable
        assert psutil.Process(proc.pid).environ().get("CS_LAUNCHER_MARK") == "from-the-hook"
        assert json.loads(state.read_text())["pid"] == proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
