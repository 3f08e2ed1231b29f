"""`coldscope schema`: the published JSON Schemas, and the JSON outputs validated against them."""

import json
import subprocess
import sys

import pytest

from tests.unit.cli.test_profile import CLI, cli, fake_profile

jsonschema = pytest.importorskip("jsonschema")


def schema(kind: str) -> dict:
    return json.loads(cli("schema", kind).stdout)


def test_profile_show_runs_and_parse_json_validate_against_the_run_schema(tmp_path, shared):
    validator = jsonschema.Draft202012Validator(schema("run"))
    out = subprocess.run(fake_profile(tmp_path, "--json"), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    [run] = json.loads(out.stdout)["runs"]
    validator.validate(run)
    store = str(tmp_path / "s.db")
    validator.validate(json.loads(cli("show", run["id"], "--json", "--store", store).stdout))
    for listed in json.loads(cli("runs", "--json", "--store", store).stdout)["runs"]:
        validator.validate(listed)
    log = shared / "fixtures/vllm-logs/v0.10.1.1_h100_llama2-7b_cudagraph-max-456.log"
    validator.validate(json.loads(cli("parse", str(log), "--json").stdout))
    # and the schema is strict: a misspelt key or a wrong type does not pass
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**run, "stagse": {}})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**run, "time_to_ready_s": "fast"})


@pytest.mark.parametrize("kind", ["plan", "simulate", "startup-model", "predict", "compare"])
def test_other_schemas_print_or_name_the_missing_model(kind):
    out = subprocess.run([CLI, "schema", kind], capture_output=True, text=True, timeout=60)
    if out.returncode == 0:
        jsonschema.Draft202012Validator.check_schema(json.loads(out.stdout))
    else:
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith(f"error: no schema for {kind}")


def test_unknown_kind_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "coldscope.cli.main", "schema", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
