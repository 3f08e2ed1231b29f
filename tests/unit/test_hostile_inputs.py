"""Every command's file inputs, fed hostile contents: a one-line error or success, never a
traceback, never a hang.

Property test (Hypothesis): each file a command reads is filled with random bytes, an empty file,
text that looks like the expected format with a huge, negative or non-finite number in it, or
random text. The command runs in-process through ``coldscope.cli.main.main`` (the same path as
the console script); it must return an exit code — any exception escaping ``main`` is the
traceback a user would see. A SIGALRM guard turns a hang (an unbounded loop on a huge number)
into a failure instead of a stuck test run.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coldscope.cli.main import main

PAPER = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "paper"

#: Seconds one command may take on one hostile input before it counts as a hang.
HANG_S = 30

HUGE = ["1e400", "-1e400", "1e30", "-3", "99999999999999999999999999999", "nan", "inf", "0"]

#: Text in the shape each input expects, with a hole for a hostile number.
SHAPES = [
    '{{"num_hidden_layers": {n}, "hidden_size": {n}, "vocab_size": {n}, '
    '"num_attention_heads": {n}, "model_type": "llama"}}',
    '{{"schema_version": 1, "stages": {{"bootstrap": {{"intercept": {n}}}}}}}',
    "arrival_timestamp,context_tokens,generated_tokens\n0,{n},{n}\n{n},1,1\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,{n},{n}\n",
    "models: [{{name: m, layers: {n}, hidden: {n}}}]\nrepetitions: {n}\n",
    "tiers:\n  - {{name: t, rate: {n}, params: {n}}}\n",
    "INFO 01-01 00:00:00 [loader.py:1] Loading weights took {n} seconds\n",
    "[{n}, {n}]",
]

contents = st.one_of(
    st.binary(max_size=2048),
    st.just(b""),
    st.builds(lambda shape, n: shape.format(n=n).encode(), st.sampled_from(SHAPES),
              st.sampled_from(HUGE)),
    st.text(max_size=512).map(lambda s: s.encode("utf-8", "surrogatepass")),
)


def _file(tmp: Path, data: bytes, name: str) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def _model_dir(tmp: Path, data: bytes) -> str:
    d = tmp / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_bytes(data)
    return str(d)


#: Each command that reads a file: a function (tmp dir, hostile bytes) -> argv.
COMMANDS = {
    "features": lambda t, b: ["features", _model_dir(t, b), "--json"],
    "features-json": lambda t, b: ["features", _file(t, b, "f.json"), "--json"],
    "predict-model": lambda t, b: ["predict", _model_dir(t, b), "--startup-model",
                                   _file(t, b, "m.json"), "--json"],
    "parse": lambda t, b: ["parse", _file(t, b, "vllm.log"), "--json"],
    "runs-store": lambda t, b: ["runs", "--store", _file(t, b, "s.db"), "--json"],
    "show-store": lambda t, b: ["show", "x", "--store", _file(t, b, "s.db")],
    "export-store": lambda t, b: ["export", "--store", _file(t, b, "s.db"),
                                  "-o", str(t / "o.csv")],
    "report-store": lambda t, b: ["report", "--store", _file(t, b, "s.db"),
                                  "-o", str(t / "r.html")],
    "campaign": lambda t, b: ["campaign", _file(t, b, "c.yaml"), "--dry-run",
                              "--store", str(t / "c.db")],
    "plan-tiers": lambda t, b: ["plan", "--tiers", _file(t, b, "t.yaml"), "--json"],
    "plan-trace": lambda t, b: ["plan", "--params", "7B", "--trace", _file(t, b, "tr.csv"),
                                "--json"],
    "plan-profile": lambda t, b: ["plan", "--params", "7B", "--profile",
                                  _file(t, b, "p.yaml"), "--json"],
    "plan-startup-model": lambda t, b: ["plan", "--params", "7B", "--startup-model",
                                        _file(t, b, "m.json"), "--json"],
    "plan-tuned": lambda t, b: ["plan", "--params", "7B", "--tuned", _file(t, b, "tune.json"),
                                "--json"],
    "plan-traffic": lambda t, b: ["plan", "--params", "7B", "--traffic",
                                  _file(t, b, "traffic.yaml"), "--json"],
    # a bundle is checked before anything is launched: the engine command never runs
    "profile-bundle": lambda t, b: ["profile", "--bundle", _file(t, b, "b.tar.gz"), "--store",
                                    str(t / "p.db"), "--", "python", "-c", "pass"],
    "simulate-trace": lambda t, b: ["simulate", "--trace", _file(t, b, "tr.csv"), "--json"],
    "simulate-sweep": lambda t, b: ["simulate", "--trace", _file(t, b"0,1,1\n", "ok.csv"),
                                    "--sweep", _file(t, b, "sw.yaml"), "--json"],
    "simulate-startup-model": lambda t, b: ["simulate", "--trace", _file(t, b, "tr.csv"),
                                            "--startup-model", _file(t, b, "m.json"), "--json"],
    "calibrate-base": lambda t, b: ["calibrate", _file(t, b, "m.json"), "--paper", str(PAPER),
                                    "--out", str(t / "c.json"), "--json"],
    "calibrate-timings": lambda t, b: ["calibrate", _file(t, b, "m.json"), "--paper", str(PAPER),
                                       "--timings", _file(t, b, "results.json"),
                                       "--out", str(t / "c.json"), "--json"],
    "calibrate-suggest": lambda t, b: ["calibrate", _file(t, b, "m.json"), "--suggest",
                                       "--candidates", _model_dir(t, b),
                                       "--candidates", _file(t, b, "f.json")],
}


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int):
    def on_alarm(signum, frame):
        raise _Hang(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_hostile_file_contents_give_an_exit_code_not_a_traceback(name, monkeypatch, capsys):
    build = COMMANDS[name]
    monkeypatch.setenv("COLDSCOPE_STORE", str(Path(tempfile.mkdtemp()) / "store.db"))

    @settings(max_examples=10, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=contents)
    def check(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            argv = build(Path(tmp), data)
            try:
                with _deadline(HANG_S):
                    code = main(argv)
            except _Hang as exc:
                pytest.fail(f"coldscope {' '.join(argv)} hung on {data[:80]!r}: {exc}")
            except SystemExit as exc:  # click may exit directly; that is not a traceback
                code = exc.code
            assert isinstance(code, int), f"{argv}: exit {code!r}"
            err = capsys.readouterr().err
            assert "Traceback" not in err, err
            if code != 0:
                lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
                assert len(lines) == 1, f"{argv} on {data[:80]!r}: stderr {err[-500:]!r}"

    check()
