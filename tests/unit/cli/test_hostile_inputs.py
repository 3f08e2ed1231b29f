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
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coldscope.cli.main import main

PAPER = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "paper"

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
    "compare-store": lambda t, b: ["compare", "--store", _file(t, b, "s.db"), "--runs-a", "x",
                                   "--runs-b", "y", "--json"],
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
    "fit-timings": lambda t, b: ["fit", "--paper", str(PAPER), "--timings",
                                 _file(t, b, "results.json"), "--out", str(t / "m.json")],
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


# --- one test per class of hostile input, each built here ------------------------------------
#
# Every file input is read with a size bound, parsed without alias expansion or unbounded
# recursion, and checked for finite, in-range numbers; a refusal is one line on stderr and
# exit 2. Text from logs and stores reaches no terminal with its control sequences.

#: What a terminal would act on: ESC (CSI, OSC, DCS...), BEL (ends an OSC), and C1 controls
#: (8-bit CSI 0x9b, OSC 0x9d, ST 0x9c).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: An OSC window title, an OSC 8 hidden hyperlink, CSI clear-screen and colour, 8-bit CSI/OSC,
#: and rich markup (a hyperlink and a style) that must be printed as text, not obeyed.
HOSTILE_TEXT = ("\x1b]0;owned\x07" "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
                "\x1b[2J\x1b[31m" "\x9b2J\x9d0;t\x9c" "\x1bP+q\x1b\\"
                "[link=https://evil.example]x[/link][bold]b[/bold]")


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    """``coldscope ARGV`` in-process under the hang guard: (exit code, stdout, stderr)."""
    try:
        with _deadline(HANG_S):
            code = main(argv)
    except _Hang as exc:
        pytest.fail(f"coldscope {' '.join(argv)} hung: {exc}")
    out = capsys.readouterr()
    return code, out.out, out.err


def _refused(argv: list[str], capsys, *needles: str) -> str:
    """Assert ``argv`` is refused with one ``error:`` line holding ``needles``; return it."""
    code, _, err = _run(argv, capsys)
    assert code == 2, f"{argv}: exit {code}, stderr {err[-400:]!r}"
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-400:]
    assert len(lines[0]) <= len("error: ") + 1000, lines[0][:200]
    assert not _CONTROL.search(lines[0]), lines[0][:200]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _startup_model_doc(**over) -> str:
    """A startup model file's start, enough to be parsed (the hostile part is ``over``)."""
    return json.dumps({"kind": "coldscope-startup-model", "schema_version": 2, **over})


def test_json_with_a_5000_digit_integer_is_refused_before_it_is_converted(tmp_path, capsys):
    doc = _startup_model_doc(created_by="x").replace('"x"', "9" * 5000)
    (tmp_path / "m.json").write_text(doc)
    _refused(["predict", "7B", "--startup-model", str(tmp_path / "m.json")], capsys,
             "5000 digits")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": '
                                       + "1" * 5000 + "}")
    _refused(["features", str(model)], capsys, "5000 digits")


def test_json_nested_100000_deep_is_refused_without_recursion(tmp_path, capsys):
    (tmp_path / "m.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _refused(["predict", "7B", "--startup-model", str(tmp_path / "m.json")], capsys,
             "nested deeper than")
    (tmp_path / "f.json").write_text("[" * 100_000 + "]" * 100_000)
    _refused(["features", str(tmp_path / "f.json")], capsys, "nested deeper than")


#: "Billion laughs": nine levels of nine aliases each, 9^9 strings once expanded.
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("argv", [
    ["predict", "7B", "--startup-model", "{f}"],           # a startup model (not .json: YAML)
    ["campaign", "{f}", "--dry-run", "--store", "{t}/c.db"],
    ["plan", "--params", "7B", "--profile", "{f}", "--json"],
    ["plan", "--tiers", "{f}", "--json"],
    ["simulate", "--trace", "{t}/ok.csv", "--sweep", "{f}", "--json"],
])
def test_yaml_aliases_are_refused_before_they_expand(argv, tmp_path, capsys):
    hostile = tmp_path / "laughs.yaml"
    hostile.write_text(LAUGHS)
    (tmp_path / "ok.csv").write_text("arrival_timestamp,context_tokens,generated_tokens\n0,1,1\n")
    argv = [a.replace("{f}", str(hostile)).replace("{t}", str(tmp_path)) for a in argv]
    _refused(argv, capsys, "aliases")


def test_a_yaml_value_on_the_command_line_cannot_expand_either(tmp_path, capsys):
    (tmp_path / "ok.csv").write_text("arrival_timestamp,context_tokens,generated_tokens\n0,1,1\n")
    laughs = "[&a [lol, lol, lol, lol], &b [*a, *a, *a, *a], &c [*b, *b, *b, *b], *c, *c]"
    _refused(["simulate", "--trace", str(tmp_path / "ok.csv"), "--set", "x=" + laughs], capsys,
             "--set x: cannot read value", "aliases")


def _safetensors(path: Path, header: dict) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.mark.parametrize("shape, needle", [
    ([2**62] * 17, "17 dimensions, more than 16"),    # the product overflows a float
    ([10**30, 10**30], "impossible shape"),          # each dimension beyond any real one
    ([10**7] * 16, "elements, more than any real model"),
    ([-1, 4], "impossible shape"),
])
def test_safetensors_shapes_are_bounded_before_they_are_multiplied(shape, needle, tmp_path,
                                                                   capsys):
    model = Path(_config_dir(tmp_path))
    _safetensors(model / "model.safetensors",
                 {"w": {"dtype": "BF16", "shape": shape, "data_offsets": [0, 2]}})
    line = _refused(["features", str(model), "--json"], capsys, needle)
    assert len(line) < 400  # the message quotes neither the shape nor its product whole


def test_a_safetensors_header_longer_than_its_bound_is_refused_unread(tmp_path, capsys):
    model = Path(_config_dir(tmp_path))
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    _refused(["features", str(model)], capsys, "refused")


def _config_dir(tmp_path: Path) -> str:
    """A model directory holding a small, sane llama config.json (no weights)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 300,
        "num_attention_heads": 1, "intermediate_size": 128}))
    return str(model)


def _fifo(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_token_file_that_is_not_a_regular_file_is_refused_unread(special, tmp_path, capsys):
    path = _fifo(tmp_path, "token") if special == "fifo" else special
    _refused(["serve", "--token-file", path, "--store", str(tmp_path / "s.db")], capsys,
             "--token-file", "not a regular file")


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("argv", [
    ["predict", "7B", "--startup-model", "{f}"],
    ["plan", "--model", "{m}", "--startup-model", "{f}", "--json"],
    ["plan", "--params", "7B", "--tuned", "{f}", "--json"],
    ["campaign", "{f}", "--dry-run"],
    ["features", "{f}"],
    ["parse", "{f}"],
])
def test_no_file_input_reads_a_device_or_a_fifo(special, argv, tmp_path, capsys):
    path = _fifo(tmp_path, "input.json") if special == "fifo" else special
    model = _config_dir(tmp_path)
    _refused([a.replace("{f}", path).replace("{m}", model) for a in argv], capsys,
             "not a regular file")


def test_a_file_input_larger_than_the_bound_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "m.json").write_text(_startup_model_doc(created_by="x" * 5000))
    monkeypatch.setenv("COLDSCOPE_MAX_INPUT_BYTES", "4096")
    _refused(["predict", "7B", "--startup-model", str(tmp_path / "m.json")], capsys,
             "larger than 4096 bytes", "COLDSCOPE_MAX_INPUT_BYTES")


def _paper_dir(tmp_path: Path) -> Path:
    """A paper data directory built here: six dense models in ``models_config.json`` and a
    well-formed timings table for them (``timings.json``), enough to fit a startup model."""
    root = tmp_path / "paper"
    root.mkdir()
    (root / "models_config.json").write_text(json.dumps({
        f"m{i}": {"size": i, "layers": 8 * i, "hidden_size": 512 * i, "vocab_size": 32000,
                  "tokenizer_size": 2 + i} for i in range(1, 7)}))
    metrics = ["framework_bootstrap", "tokenizer_init", "model_loading",
               "dynamo_transform_time", "graph_compile_cached", "graph_compile_general_shape",
               "kv_cache_profiling", "graph_capturing"]
    data: dict[str, list[float]] = {m: [] for m in [*metrics, "total_time", "actual_total_time"]}
    for i in range(1, 7):
        row = [5 + 0.1 * i, 0.1 * i + 0.05 * (i % 2), 3.6 * i + 0.1 * (i % 3), 2.4 * i, 0, 0,
               1 + 0.04 * i, 0.5 + 0.08 * i]
        for m, v in zip(metrics, row, strict=True):
            data[m].append(v)
        data["total_time"].append(sum(row))
        data["actual_total_time"].append(sum(row) + 1)
    (root / "timings.json").write_text(json.dumps({
        "labels": [f"output_model_m{i}.txt" for i in range(1, 7)], "data": data}))
    return root


def test_a_startup_model_whose_prediction_would_overflow_is_refused_on_load(tmp_path, capsys):
    """Coefficients of 1e308 made every prediction infinite (written as null); such a file is
    now refused where it is read, naming the first bad number, so no answer rests on it."""
    root = _paper_dir(tmp_path)
    model = tmp_path / "model.json"
    assert _run(["fit", "--paper", str(root), "--timings", str(root / "timings.json"),
                 "--out", str(model)], capsys)[0] == 0
    doc = json.loads(model.read_text())
    for bucket in doc["buckets"].values():  # every formula now overflows a float
        bucket["coef"] = [1e308] * len(bucket["coef"])
    model.write_text(json.dumps(doc))
    code, out, err = _run(["predict", _config_dir(tmp_path), "--startup-model", str(model),
                           "--json"], capsys)
    assert code == 2 and out == ""
    assert "buckets.bootstrap.coef[0]" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


#: Timings files ``fit --paper --timings`` must refuse, each with what the refusal names.
MALFORMED_TIMINGS = [
    ("[]", "must be a mapping"),
    ('{"labels": 3, "data": {}}', "not a paper comparison_results.json"),
    ('{"labels": ["output_model_m1.txt"], "data": []}', "not a paper comparison_results.json"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": 5}}',
     "not a paper comparison_results.json"),
    ('{"labels": [7], "data": {"actual_total_time": [5]}}', "labels[0]"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": ["5"]}}',
     "actual_total_time[0]"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [-5]}}',
     "not a number of seconds"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [1e300]}}',
     "not a number of seconds"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [1e999]}}',
     "not a finite number"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [NaN]}}',
     "not valid JSON"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [[5]]}}',
     "actual_total_time[0]"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [true]}}',
     "actual_total_time[0]"),
    ('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [5], '
     '"model_loading": [{"s": 1}]}}', "model_loading[0]"),
    ('{"labels": ["nothing.txt"], "data": {}}', "names no model"),
]


@pytest.mark.parametrize("text, needle", MALFORMED_TIMINGS)
def test_fit_refuses_malformed_timings_in_one_line(text, needle, tmp_path, capsys):
    timings = tmp_path / "results.json"
    timings.write_text(text)
    _refused(["fit", "--paper", str(_paper_dir(tmp_path)), "--timings", str(timings),
              "--out", str(tmp_path / "m.json")], capsys, needle)


def test_a_models_config_entry_that_is_not_a_mapping_is_one_line(tmp_path, capsys):
    root = _paper_dir(tmp_path)
    (root / "models_config.json").write_text('{"m1": [1, 2]}')
    timings = tmp_path / "results.json"
    timings.write_text('{"labels": ["output_model_m1.txt"], "data": {"actual_total_time": [5]}}')
    _refused(["fit", "--paper", str(root), "--timings", str(timings), "--out",
              str(tmp_path / "m.json")], capsys, "not a mapping")


def test_an_error_quoting_a_hostile_value_is_one_clean_bounded_line(tmp_path, capsys):
    (tmp_path / "f.json").write_text(json.dumps({"name": HOSTILE_TEXT * 20_000, "layers": 2}))
    _refused(["features", str(tmp_path / "f.json")], capsys, "features JSON for")  # cut


# --- terminals ----------------------------------------------------------------------------------

def _hostile_log(tmp_path: Path) -> Path:
    """A short vLLM log whose model name, one engine line and one error line carry terminal
    control sequences and rich markup; its own file name carries them too."""
    b = HOSTILE_TEXT
    lines = [
        "(APIServer pid=1) INFO 11-29 10:12:43 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  "
        "version 0.32.0",
        f"(APIServer pid=1) INFO 11-29 10:12:43 [api_utils.py:347]   █▄█▀ █     █     █     █  "
        f"model   /m/tiny{b}",
        "(APIServer pid=1) INFO 11-29 10:12:43 [model.py:733] Resolved architecture: "
        "LlamaForCausalLM",
        f"(Worker pid=2) INFO 11-29 10:13:44 [cpu_model_runner.py:68] Starting to load model "
        f"/m/tiny{b}...",
        "(Worker pid=2) INFO 11-29 10:13:44 [base_loader.py:82] Initializing model took "
        "0.292715 seconds",
        f"(Worker pid=2) WARNING 11-29 10:13:49 [decorators.py:333] [backbone] Compiling model "
        f"again due to a load failure from /cache{b}/rank_0_0/model, reason: {b}",
        "(EngineCore pid=3) ERROR 11-29 10:13:50 [core.py:1] EngineCore failed to start.",
        f"(EngineCore pid=3) ERROR 11-29 10:13:50 [core.py:1] RuntimeError: out of memory {b}",
    ]
    path = tmp_path / ("vllm" + b.replace("/", "_") + ".log")
    path.write_text("\n".join(lines) + "\n")
    return path


def _assert_inert(text: str, where: str) -> None:
    bad = sorted({f"{ord(c):#04x}" for c in _CONTROL.findall(text)})
    assert not bad, f"{where} passes control characters {bad} to the terminal"
    assert "https://evil.example" not in text or "[link=https://evil.example]" in text, where


def test_parse_passes_no_control_sequence_from_a_log_to_the_terminal(tmp_path):
    """The real command, as a user runs it: its stdout and stderr hold no ESC, BEL or C1
    byte, and the log's rich markup is printed as text, not obeyed."""
    log = _hostile_log(tmp_path)
    cli = [sys.executable, "-m", "coldscope.cli.main"]
    env = {**os.environ, "COLUMNS": "200", "COLDSCOPE_STORE": str(tmp_path / "s.db")}
    for args in (["parse", str(log)], ["parse", str(log), "--vs-paper", "--save"]):
        out = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120,
                             env=env)
        assert out.returncode == 2, out.stderr  # the log shows a failed start-up
        assert "compile_cache_load_failed" in out.stdout  # the hostile line is quoted...
        assert "[bold]b[/bold]" in out.stdout  # ...its markup as text
        _assert_inert(out.stdout, f"{args} stdout")
        _assert_inert(out.stderr, f"{args} stderr")
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    # the stored run (its id is what the start-up is, issue 33): log tail and model, listed
    # and shown
    for args in (["runs"], ["show", "log-"], ["show", "log-", "--env"]):
        out = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120,
                             env=env)
        assert out.returncode == 0, out.stderr
        assert "[bold]" in out.stdout  # the id's (and the log's) markup, as text
        _assert_inert(out.stdout + out.stderr, f"{args}")


def test_every_text_renderer_is_inert_on_a_stored_run_full_of_control_sequences(capsys):
    """A run from a hostile store (every text field holds control sequences): each table of
    runs prints it inert on coldscope's console, on a terminal (colours on) and a pipe."""
    from coldscope.cli.common import console
    from coldscope.core.records import Finding, Run
    from coldscope.render.tables import (
        compare_table,
        environment_table,
        failed_detail,
        processes_table,
        runs_table,
        timeline_table,
    )
    from coldscope.util.terminal import SafeConsole
    b = HOSTILE_TEXT
    run = Run.model_validate({
        "id": "r" + b, "status": "failed", "cache": "cold", "reason": "boom" + b,
        "label": "l" + b, "started_at": "2026-12-01T01:59:57" + b, "log_tail": ("tail" + b),
        "model": {"name": "m" + b, "path": "/m" + b}, "notes": ["note" + b],
        "stages": {"bootstrap": 1.0}, "sources": {"bootstrap": "log" + b},
        "substeps": {"bootstrap/x" + b: 0.5}, "time_to_ready_s": 2.0,
        "findings": [Finding(id="f" + b, stage="bootstrap" + b, evidence="line 1: " + b,
                             advice="do" + b)],
    })
    for tty in (False, True):
        out = SafeConsole(force_terminal=True, width=200) if tty else console()
        for renderable in (timeline_table(run), environment_table(run), processes_table(run),
                           compare_table([run, run]), runs_table([run], width=200),
                           failed_detail(run), "plain string " + b):
            out.print(renderable)
        text = capsys.readouterr().out
        if tty:  # rich's own colours are escape sequences: drop those, nothing else may remain
            text = re.sub(r"\x1b\[[0-9;]*m", "", text)
        _assert_inert(text, f"renderers (terminal={tty})")
        assert "[bold]b[/bold]" in text


@pytest.mark.parametrize("text, needle", MALFORMED_TIMINGS[1:-1])  # a row with no total is skipped
def test_report_refuses_malformed_paper_timings_in_one_line(text, needle, tmp_path, capsys):
    root = _paper_dir(tmp_path)
    table = root / "figures" / "figure-rest" / "avg_comparison_results.json"
    table.parent.mkdir(parents=True)
    table.write_text(text)
    _refused(["report", "--paper", str(root), "-o", str(tmp_path / "r.html"), "--store",
              str(tmp_path / "none.db")], capsys, needle)
