"""compare's runner half without starting anything: command lines read as a shell would, and
the plan of start-ups (primes first, then a b a b ...) handed to the runner."""


import pytest

from coldscope.core.records import Run
from coldscope.launch import interleave
from coldscope.launch.interleave import arms, run_ab, split_command
from coldscope.util.errors import ColdscopeError


@pytest.mark.parametrize("text, argv, env", [
    ("python -m x --flag", ["python", "-m", "x", "--flag"], {}),
    ("A=1 B='two words' python -m x", ["python", "-m", "x"], {"A": "1", "B": "two words"}),
    ("python A=1", ["python", "A=1"], {}),          # only leading words are environment
    ("=1 python", ["=1", "python"], {}),            # not a variable name
    ("X= python", ["python"], {"X": ""}),
    ("python --c '{\"mode\": 1}'", ["python", "--c", '{"mode": 1}'], {}),
])
def test_split_command_reads_leading_assignments_as_environment(text, argv, env):
    assert split_command(text) == (argv, env)


@pytest.mark.parametrize("text", ["", "A=1", "python 'unclosed"])
def test_split_command_refuses_what_is_no_command(text):
    with pytest.raises(ColdscopeError):
        split_command(text)


@pytest.mark.parametrize("cache, primes", [("warm", ["a", "b"]), ("cold", [])])
def test_run_ab_plans_primes_then_interleaved_runs(tmp_path, monkeypatch, cache, primes):
    seen = []

    def fake_sequence(configs, store, *, on_run, **_):
        for i, config in enumerate(configs):
            seen.append((config.label, tuple(config.command), dict(config.env), config.cache))
            run = Run(id=f"r{i}", status="ok", cache="cold" if "prime" in config.label
                      else cache, time_to_ready_s=10.0 + i, started_at=f"t{i:02d}",
                      label=config.label)
            on_run(run)
        return []

    monkeypatch.setattr(interleave, "run_sequence", fake_sequence)
    two = arms("A=1 python a.py", "python b.py --eager", name="n", cache=cache,
               cache_root=tmp_path / "caches", timeout=60.0)
    (tmp_path / "caches" / "warm" / "k").mkdir(parents=True)
    done = run_ab(two, name="n", repeat=3, cache=cache, store=None)
    labels = [s[0] for s in seen]
    assert labels == [f"n:{p}:prime" for p in primes] + ["n:a", "n:b"] * 3
    assert seen[-2][1:] == (("python", "a.py"), {"A": "1"}, cache)
    assert seen[-1][1:] == (("python", "b.py", "--eager"), {}, cache)
    assert [s for s, _ in done.primes] == primes
    assert [s for s, _ in done.measured] == ["a", "b"] * 3
    result = done.comparison()
    assert result.order == ["a", "b"] * 3
    assert [p.side for p in result.primes] == primes
    assert result.a.n == 3 and result.a.env == {"A": "1"}
    assert result.a.command == "A=1 python a.py"
    assert (tmp_path / "caches" / "warm").exists() == (cache == "cold")  # warm caches removed
