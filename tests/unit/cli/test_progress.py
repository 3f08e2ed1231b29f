"""Live progress of `profile` and `demo` on a terminal (pseudo-terminals), on the fake engine
printing vLLM's stage lines: elapsed time and the stage the engine is in now, on stderr; never
with --json or when piped; also with --quiet (which only silences the engine's output)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from tests.serve_replay import free_port
from tests.unit.cli.test_profile import CLI, FAKE

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(argv: list[str], cwd: Path, *, tty_stdout: bool = True) -> tuple[int, str, str]:
    """Run ``argv`` with stderr, and stdout unless ``tty_stdout`` is false, on pseudo-terminals;
    (exit code, stdout, stderr), terminal escapes removed."""
    err_master, err_slave = pty.openpty()
    out_master = out_slave = None
    if tty_stdout:
        out_master, out_slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=out_slave if tty_stdout else subprocess.PIPE,
                            stderr=err_slave, stdin=subprocess.DEVNULL, cwd=cwd,
                            env={**os.environ, "COLUMNS": "200", "TERM": "xterm"})
    os.close(err_slave)
    readers: dict[int, bytearray] = {err_master: bytearray()}
    if out_master is not None:
        os.close(out_slave)
        readers[out_master] = bytearray()
    elif proc.stdout is not None:
        readers[proc.stdout.fileno()] = bytearray()
    got = dict(readers)
    while readers:
        ready, _, _ = select.select(list(readers), [], [], 120)
        assert ready, "no output for 120 s"
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # a pty whose other end closed
                data = b""
            if data:
                readers[fd] += data
            else:
                readers.pop(fd)
    code = proc.wait(timeout=60)
    for fd in (err_master, out_master):
        if fd is not None:
            os.close(fd)
    texts = {fd: _ANSI.sub("", buf.decode("utf-8", "replace")).replace("\r", "\n")
             for fd, buf in got.items()}
    out = texts[out_master] if out_master is not None else texts[proc.stdout.fileno()]
    if proc.stdout is not None:
        proc.stdout.close()
    return code, out, texts[err_master]


def profile_argv(tmp_path: Path, *extra: str) -> list[str]:
    return [CLI, "profile", "--store", str(tmp_path / "s.db"), "--cache-root",
            str(tmp_path / "c"), "--no-spans", "--no-probe", "--no-request", *extra, "--",
            sys.executable, FAKE, "--port", str(free_port()), "--stage-lines", "0.6",
            "--delay", "0.6"]


def stages_seen(err: str) -> list[str]:
    seen: list[str] = []
    for stage in re.findall(r"now: ([a-z_]+(?: › [a-z_]+)?) \(entered at [\d.]+ s\)", err):
        if not seen or seen[-1] != stage:
            seen.append(stage)
    return seen


def test_profile_shows_elapsed_time_and_the_stage_on_a_terminal_even_with_quiet(tmp_path):
    code, out, err = on_terminal(profile_argv(tmp_path, "--quiet"), tmp_path)
    assert code == 0, err
    assert stages_seen(err) == ["bootstrap", "model_loading", "torch_compile",
                                "server_ready"]
    assert re.search(r"0:00:0[1-9]", err)  # time since the engine's launch, ticking
    assert "│" not in err  # --quiet: no engine output, only the progress row
    assert "time to ready" in out  # the run's table after the row is taken down


def test_profile_progress_beside_the_engine_output(tmp_path):
    code, _, err = on_terminal(profile_argv(tmp_path, "--repeat", "2"), tmp_path)
    assert code == 0, err
    assert "│ INFO Starting to load model fake..." in err
    assert "now: model_loading" in err
    assert re.search(r"run 1/2 \S+ \(cold\)", err) and re.search(r"run 2/2 \S+ \(cold\)", err)


def test_no_progress_with_json_or_when_piped(tmp_path):
    code, out, err = on_terminal(profile_argv(tmp_path, "--quiet", "--json"), tmp_path)
    assert code == 0, err
    assert "now:" not in err and "0:00:0" not in err
    assert json.loads(out)["runs"][0]["status"] == "ok"

    code, out, err = on_terminal(profile_argv(tmp_path, "--quiet"), tmp_path, tty_stdout=False)
    assert code == 0, err
    assert "now:" not in err and "time to ready" in out

    piped = subprocess.run(profile_argv(tmp_path, "--quiet"), capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "now:" not in piped.stderr and "\x1b[" not in piped.stderr


DEMO = """
import sys
from coldscope import engines
from coldscope.cli.main import main
engines.demo_command = lambda model, port: [sys.executable, {fake!r}, "--model", model,
                                            "--port", str(port), "--stage-lines", "0.4"]
sys.exit(main(["demo", "--model", "m", "--port", {port!r}, "--store", "s.db", *sys.argv[1:]]))
"""


def test_demo_shows_progress_for_both_runs(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    script = tmp_path / "demo.py"
    script.write_text(DEMO.format(fake=FAKE, port=str(free_port())))
    code, out, err = on_terminal([sys.executable, str(script)], tmp_path)
    assert code == 0, err + out
    assert re.search(r"run 1/2 \S+ \(cold, fills the warm cache\)", err)
    assert re.search(r"run 2/2 \S+ \(warm\)", err)
    assert "now: torch_compile" in err
    code, out, err = on_terminal([sys.executable, str(script), "--json"], tmp_path)
    assert code == 0, err + out
    assert "now:" not in err and len(json.loads(out)["runs"]) == 2


def store_of_runs(tmp_path: Path, n: int) -> Path:
    """A real store of ``n`` successful runs over four config-only Llama shapes, written in
    one transaction (``Store.add_runs``: a commit per run would make a large store slow to
    build)."""
    from coldscope.store.db import Store
    from tests.shapes import shape_run, write_shape

    db = tmp_path / "big.db"
    shapes = [(write_shape(tmp_path / f"shape{i}", 2 + 2 * i, i), 2 + 2 * i) for i in range(4)]
    with Store(db) as store:
        store.add_runs((shape_run(f"run{k:05d}", *shapes[k % 4]), None) for k in range(n))
    return db


def test_fit_shows_a_progress_bar_while_reading_and_fitting(tmp_path, shared):
    db = store_of_runs(tmp_path, 250)
    argv = [CLI, "fit", "--store", str(db), "--out", str(tmp_path / "m.json")]
    code, out, err = on_terminal(argv, tmp_path)
    assert code == 0, err
    for seen in ("reading 100/250 stored runs", "reading 250/250 stored runs",
                 "reading the models of 250 runs", "fitting the startup model on 250 "
                 "observations"):
        assert seen in err
    assert "trained on 4 dense models" in out

    code, out, err = on_terminal([*argv, "--json"], tmp_path)
    assert code == 0 and "reading" not in err and json.loads(out)["trained_on"]["n_models"] == 4
    code, out, err = on_terminal(argv, tmp_path, tty_stdout=False)
    assert code == 0 and "reading" not in err and "trained on 4" in out
