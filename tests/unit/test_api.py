"""The front door: ``import coldscope`` is light, every public name resolves, each function
does what its command does, and every example in docs/api.md runs and prints what it shows.

Logs are the real ones in ../shared/fixtures (read in place); expected values come from the
log text itself (the version an engine prints, the seconds the paper's harness prints)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import coldscope
from coldscope.util.errors import ColdscopeError
from tests.shapes import shape_run, write_shape

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
VLLM_LOGS = SHARED / "fixtures" / "vllm-logs"
WILD_LOGS = SHARED / "fixtures" / "wild-logs"
PAPER = SHARED / "data" / "paper"
CONFIGS = SHARED / "fixtures" / "model-configs"
API_DOC = ROOT / "docs" / "api.md"

#: What ``import coldscope`` must not load: an engine, the web server, pyarrow, Ray.
HEAVY = ("torch", "vllm", "fastapi", "uvicorn", "pyarrow", "ray")
#: The front door the issue asks for, at least.
FRONT_DOOR = ("Run", "Store", "parse_log", "profile", "compare", "fit", "predict", "calibrate",
              "plan", "simulate", "tune")


def _python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing imported yet) and return its stdout."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the package ---------------------------------------------------------------------------------


def test_import_and_the_front_door_names_load_no_heavy_module() -> None:
    heavy = json.dumps(HEAVY)
    out = _python(
        "import json, sys\n"
        "import coldscope\n"
        f"heavy = {heavy}\n"
        "before = [m for m in heavy if m in sys.modules]\n"
        "for name in ('Run', 'Store', 'parse_log', 'profile', 'compare', 'fit', 'predict',\n"
        "             'calibrate', 'plan', 'simulate', 'tune', 'RunConfig', 'StartupModel'):\n"
        "    getattr(coldscope, name)\n"
        "after = [m for m in heavy if m in sys.modules]\n"
        "print(json.dumps([before, after]))\n")
    assert json.loads(out) == [[], []]


def test_every_public_name_resolves_and_dir_lists_them() -> None:
    assert set(FRONT_DOOR) <= set(coldscope.__all__)
    for name in coldscope.__all__:
        assert getattr(coldscope, name) is not None, name
    assert set(dir(coldscope)) == set(coldscope.__all__)
    assert coldscope.__version__
    with pytest.raises(AttributeError):
        coldscope.no_such_name  # noqa: B018


def test_the_front_door_is_the_library_not_a_copy() -> None:
    """``compare`` is the comparison core and ``plan`` the planner, not wrappers of them; the
    records are the ones the library returns."""
    from coldscope.analysis.comparison import compare
    from coldscope.core.records import Run
    from coldscope.planning.planner import plan
    from coldscope.store.db import Store
    assert coldscope.compare is compare and coldscope.plan is plan
    assert coldscope.Run is Run and coldscope.Store is Store


def test_the_package_is_typed() -> None:
    assert (ROOT / "src" / "coldscope" / "py.typed").is_file()
    assert '"py.typed"' in (ROOT / "pyproject.toml").read_text()


# -- parse_log -----------------------------------------------------------------------------------


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace")


def _harness_seconds(text: str) -> float:
    """The paper harness's own figure: ``initialize_engine took X seconds`` (the log's end)."""
    return float(re.findall(r"initialize_engine took ([\d.]+) seconds", text)[-1])


def _engine_version(text: str) -> str:
    """The version the engine prints: ``LLM engine (vX)``, the API server's banner or line,
    or SGLang's ``SGLang Version X``."""
    m = re.search(r"LLM engine \(v([\w.+]+)\)|version\s+([\d][\w.+]*)|SGLang Version ([\w.+]+)",
                  text)
    assert m is not None
    return next(g for g in m.groups() if g)


@pytest.mark.parametrize("name", sorted(p.name for p in VLLM_LOGS.glob("*.log")))
def test_parse_log_of_a_paper_log_is_one_run_ready_when_the_harness_says(name: str) -> None:
    path = VLLM_LOGS / name
    [run] = coldscope.parse_log(path)
    text = _text(path)
    assert run.status == "ok" and run.id == name and run.log_path == str(path)
    assert run.engine.version == _engine_version(text)
    assert run.time_to_ready_s == pytest.approx(_harness_seconds(text), abs=0.005)


@pytest.mark.parametrize("name", sorted(p.name for p in WILD_LOGS.glob("*.log")
                                        if "sglang-0.5.7" not in p.name))
def test_parse_log_of_a_log_from_the_wild_is_one_run_of_the_engine_it_names(name: str) -> None:
    """One start-up each, also the 0.29 log that opens with a harness's summary repeating
    the engine's lines (the README of the fixtures says so)."""
    path = WILD_LOGS / name
    [run] = coldscope.parse_log(str(path))
    assert run.status == "ok"
    assert run.engine.name == name.split("-")[0]
    assert run.engine.version == _engine_version(_text(path))


def test_parse_log_gives_one_run_per_start_up_of_a_restarted_log(tmp_path: Path) -> None:
    first = VLLM_LOGS / "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log"
    second = VLLM_LOGS / "v0.11.0_h100_opt-6.7b_unpatched.log"
    log = tmp_path / "replica.log"
    log.write_bytes(first.read_bytes() + second.read_bytes())
    runs = coldscope.parse_log(log)
    assert [r.id for r in runs] == ["replica.log#1", "replica.log#2"]
    for run, source in zip(runs, (first, second), strict=True):
        text = _text(source)
        assert run.status == "ok"
        assert run.engine.version == _engine_version(text)
        assert run.time_to_ready_s == pytest.approx(_harness_seconds(text), abs=0.005)
    # read alone, the log that came first gives the same stages: nothing of the second leaks
    [alone] = coldscope.parse_log(first)
    assert runs[0].stages == alone.stages


@pytest.mark.parametrize("first, second", [
    # benchmark requests after the first one's ready line (its serving life)
    ("vllm-0.25.1-gb10-gemma4-26b-a4b-nvfp4.log", "vllm-0.19.1-a100-40gb-qwen3-8b.log"),
    # the second opens with a container banner (SGLang's version) before its start line
    ("vllm-0.19.1-a100-40gb-qwen3-8b.log", "sglang-0.5.11nv-gb10-qwen2.5-1.5b.log"),
])
def test_parse_log_of_two_wild_logs_appended_reads_each_as_alone(
        tmp_path: Path, first: str, second: str) -> None:
    log = tmp_path / "appended.log"
    log.write_bytes((WILD_LOGS / first).read_bytes() + (WILD_LOGS / second).read_bytes())
    runs = coldscope.parse_log(log)
    assert len(runs) == 2
    for run, name in zip(runs, (first, second), strict=True):
        assert run.status == "ok" and run.engine.name == name.split("-")[0]
        assert run.engine.version == _engine_version(_text(WILD_LOGS / name))
        assert run.stages == coldscope.parse_log(WILD_LOGS / name)[0].stages


def test_parse_log_reads_gzip_like_the_plain_log(tmp_path: Path) -> None:
    path = WILD_LOGS / "vllm-0.19.1-a100-40gb-qwen3-8b.log"
    packed = tmp_path / "engine.log.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    [plain] = coldscope.parse_log(path)
    [run] = coldscope.parse_log(packed)
    assert (run.time_to_ready_s, run.stages) == (plain.time_to_ready_s, plain.stages)


def test_parse_log_of_a_start_up_that_never_became_ready_is_a_failed_run(
        tmp_path: Path) -> None:
    lines = _text(WILD_LOGS / "vllm-0.13.0-rtxa5000-qwen2.5-14b-awq.log").splitlines(True)
    cut = next(i for i, line in enumerate(lines) if "Application startup complete" in line)
    log = tmp_path / "truncated.log"
    log.write_text("".join(lines[:cut]))
    [run] = coldscope.parse_log(log)
    assert run.status == "failed" and run.reason


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.log", "missing.log"),
    (lambda d: d, "is a directory"),
    (lambda d: _write(d / "notes.txt", "just some text\nno engine here\n"), "known engine"),
    (lambda d: _write(d / "-", "not stdin\n"), "known engine"),
])
def test_parse_log_refuses_bad_input_with_one_line(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(ColdscopeError) as err:
        coldscope.parse_log(make(tmp_path))
    assert message in str(err.value) and "\n" not in str(err.value)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_coldscope_parse_prints_the_start_ups_parse_log_gives(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command and the function agree: one line per start-up of a restarted log."""
    from coldscope.cli.main import main
    first = VLLM_LOGS / "v0.9.0_h100_opt-6.7b_unpatched.log"
    second = VLLM_LOGS / "v0.8.0_h100_opt-6.7b_unpatched.log"
    log = tmp_path / "replica.log"
    log.write_bytes(first.read_bytes() + second.read_bytes())
    assert main(["parse", str(log), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["id"], r["time_to_ready_s"]) for r in printed] == \
        [(r.id, r.time_to_ready_s) for r in coldscope.parse_log(log)]
    assert main(["parse", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 start-ups in 1 log")
    assert [r["id"] for r in printed] == ["replica.log#1", "replica.log#2"]
    # the second start-up's first lines (before its start line) came from an earlier run
    # (the clock goes back): they are read with it, so each log reads as it does alone
    for run, source in zip(printed, (first, second), strict=True):
        assert run["time_to_ready_s"] == pytest.approx(_harness_seconds(_text(source)), abs=0.005)
        assert run["stages"] == coldscope.parse_log(source)[0].stages


# -- fit, predict, calibrate ---------------------------------------------------------------------


def _shapes(tmp_path: Path, layer_counts: tuple[int, ...], **kw) -> list:
    """Runs of config-only llama shapes with known stages: compile = k x (4 + layers)."""
    return [shape_run(f"run{i}", write_shape(tmp_path / f"shape{i}", layers, i), layers,
                      started_at=f"2026-11-29T10:0{i}:00Z", **kw)
            for i, layers in enumerate(layer_counts)]


def test_fit_on_runs_then_predict_recovers_the_stages_they_were_made_with(
        tmp_path: Path) -> None:
    model = coldscope.fit(_shapes(tmp_path, (2, 4, 6, 8)))  # compile = 5 s x (4 + layers)
    features = coldscope.model_features(tmp_path / "shape1")
    p = coldscope.predict(model, features)
    assert p.stages["torch_compile"].s == pytest.approx(5.0 * (4 + 4))
    assert p.total_s == pytest.approx(30 + 0.2 + 1 + 40 + 2 + 1 + 0.5)
    # the same from the saved file and the model directory, as `coldscope predict` reads them
    model.save(tmp_path / "m.json")
    again = coldscope.predict(tmp_path / "m.json", tmp_path / "shape1")
    assert again.to_dict() == p.to_dict()


def test_calibrate_on_runs_of_a_new_machine(tmp_path: Path) -> None:
    base = coldscope.fit(_shapes(tmp_path / "a", (2, 4, 6, 8)))
    there = _shapes(tmp_path / "b", (2, 4, 6, 8), compile_per_layer=2.5, bootstrap=33.0)
    moved = coldscope.calibrate(base, there, models=["shape0", "shape3"])
    cal = moved.file_.calibration
    assert cal is not None and cal.models == ["shape0", "shape3"]
    assert cal.stages["torch_compile"].value == pytest.approx(0.5)
    assert cal.base_source == base.file_.trained_on.source  # a model object: its training
    p = coldscope.predict(moved, tmp_path / "b" / "shape2")
    assert p.total_s == pytest.approx(33 + 0.2 + 1 + 2.5 * (4 + 6) + 2 + 1 + 0.5)


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": ("sparse",)}, "--kinds"),
    ({"kinds": ()}, "--kinds"),
    ({"level": 0.999}, "--level"),
])
def test_fit_refuses_bad_options_with_one_line(tmp_path: Path, kwargs, message: str) -> None:
    with pytest.raises(ColdscopeError) as err:
        coldscope.fit(_shapes(tmp_path, (2, 4, 6)), **kwargs)
    assert message in str(err.value)


def test_predict_refuses_an_unfitted_model_and_a_bad_page_cache(tmp_path: Path) -> None:
    features = coldscope.model_features(write_shape(tmp_path / "m", 4, 0))
    with pytest.raises(ColdscopeError, match="not fitted"):
        coldscope.predict(coldscope.StartupModel(), features)
    with pytest.raises(ColdscopeError, match="hot or cold"):
        coldscope.predict(coldscope.StartupModel(), features, page_cache="warm")  # type: ignore[arg-type]


# -- docs/api.md ---------------------------------------------------------------------------------

#: The info string of an example that is shown but not run: it starts an engine.
NOT_RUN = "python starts-an-engine"
_BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _examples(text: str) -> list[tuple[str, str, str, str | None]]:
    """(section, info string, code, the ```text block right after it or None) per code block
    of a python example, in order."""
    sections = [(m.start(), m.group(1)) for m in re.finditer(r"^## `(\w+)`", text, re.M)]
    blocks = list(_BLOCK.finditer(text))
    out = []
    for i, m in enumerate(blocks):
        info = m.group(1).strip()
        if not info.startswith("python"):
            continue
        section = next((name for start, name in reversed(sections) if start < m.start()), "")
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        expected = after.group(2) if after is not None and after.group(1).strip() == "text" \
            and not text[m.end():after.start()].strip() else None
        out.append((section, info, m.group(2), expected))
    return out


def _example_dir(d: Path) -> Path:
    """The files docs/api.md names, linked to the real fixtures (a restarted log written)."""
    d.mkdir()
    (d / "vllm.log").symlink_to(VLLM_LOGS / "v0.11.0_h100_opt-6.7b_unpatched.log")
    (d / "restarted.log").write_bytes(
        (VLLM_LOGS / "v0.10.0_h100_opt-6.7b_cold-compile_unpatched.log").read_bytes()
        + (VLLM_LOGS / "v0.11.0_h100_opt-6.7b_unpatched.log").read_bytes())
    (d / "opt-6.7b").mkdir()
    for version in ("0.8.0", "0.9.0", "0.10.0", "0.11.0"):
        [log] = VLLM_LOGS.glob(f"v{version}_h100_opt-6.7b_*unpatched.log")
        (d / "opt-6.7b" / f"vllm-{version}.log").symlink_to(log)
    (d / "paper").symlink_to(PAPER)
    (d / "models").mkdir()
    (d / "models" / "llama-2-7b").symlink_to(CONFIGS / "llama-2-7b-hf")
    (d / "trace.csv").symlink_to(SHARED / "data" / "traces" / "AzureLLMInferenceTrace_code.csv")
    return d


def test_the_api_doc_has_an_example_of_every_front_door_name() -> None:
    examples = _examples(API_DOC.read_text())
    assert set(FRONT_DOOR) <= {section for section, *_ in examples}
    # only the two that start an engine are shown without being run
    assert {section for section, info, *_ in examples if info != "python"} == \
        {"profile", "tune"}
    assert all(info in ("python", NOT_RUN) for _, info, *_ in examples)


def test_the_api_doc_examples_run_and_print_what_they_show(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_example_dir(tmp_path / "examples"))
    monkeypatch.setenv("COLDSCOPE_STORE", str(tmp_path / "examples" / "default.db"))
    session: dict[str, object] = {"__name__": "api_doc"}
    for section, info, code, expected in _examples(API_DOC.read_text()):
        if info == NOT_RUN:
            compile(code, f"docs/api.md ({section})", "exec")  # shown, so at least valid
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"docs/api.md ({section})", "exec"), session)
        if expected is not None:
            assert printed.getvalue().strip() == expected.strip(), section
