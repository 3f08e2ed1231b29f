"""Every file input of plan, simulate and traces: random bytes, an empty file and a huge number
give a one-line error (exit 2), never a traceback."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from coldscope.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
AZURE_CODE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"

CONTENTS = {
    "random": os.urandom(3000),
    "random-text": bytes(random.Random(1).choices(b"abc,:{}[]\n -1e999", k=3000)),
    "empty": b"",
    "huge-number": b"1e999999",
    "nul": b"\x00" * 64,
}


#: Files of keys laid over defaults: an empty one is a valid "no change".
OVERRIDES = {"plan --profile", "plan --traffic", "simulate --replica"}


def _commands(path: str, tmp: Path) -> dict[str, list[str]]:
    trace = str(AZURE_CODE)
    return {
        "plan --trace": ["plan", "--params", "7B", "--trace", path],
        "plan --profile": ["plan", "--params", "7B", "--profile", path],
        "plan --traffic": ["plan", "--params", "7B", "--traffic", path],
        "plan --tiers": ["plan", "--params", "7B", "--tiers", path],
        "plan --startup-model": ["plan", "--model", path, "--startup-model", path],
        "simulate --trace csv": ["simulate", "--trace", path],
        "simulate --replica": ["simulate", "--trace", trace, "--replica", path],
        "simulate --sweep": ["simulate", "--trace", trace, "--sweep", path],
        "simulate --startup-plan": ["simulate", "--trace", trace, "--startup-plan", path],
        "simulate --startup-model": ["simulate", "--trace", trace, "--startup-model", path,
                                     "--model", path],
    }


@pytest.mark.parametrize("kind", sorted(CONTENTS))
@pytest.mark.parametrize("command", sorted(_commands("x", Path("."))))
def test_bad_file_is_a_one_line_error(tmp_path, capsys, kind, command):
    if not AZURE_CODE.exists() and "simulate" in command:
        pytest.skip("shared traces not present")
    path = tmp_path / "input.csv"
    path.write_bytes(CONTENTS[kind])
    args = _commands(str(path), tmp_path)[command]
    code = main(args)
    err = capsys.readouterr().err
    if kind == "empty" and command in OVERRIDES:
        assert code == 0, err  # an empty override file changes nothing: not an error
        return
    assert code == 2, (command, kind, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
