"""The Ray executor on a local Ray instance and the fake engine: results come back to the
driver's store, and a lost worker becomes a failed run that is retried."""


import pytest

from coldscope.campaign import campaign_runs, expand, parse_spec, run_campaign
from coldscope.campaign.progress import Reporter
from coldscope.store.db import Store
from coldscope.util.errors import ColdscopeError
from tests.conftest import run_processes
from tests.unit.campaign.test_local import fake_spec

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             resources={"coldscope_node": 1})
    yield
    ray.shutdown()


def crash_first_attempt(marker: str):
    """A wave task whose first call kills its Ray worker, as a lost node would."""

    def task(wave, spec, base):
        import os
        from pathlib import Path

        from coldscope.campaign.ray_exec import wave_task
        if not Path(marker).exists():
            Path(marker).touch()
            os._exit(1)
        return wave_task(wave, spec, base)

    return task


def test_lost_worker_is_stored_as_failed_and_retried(local_ray, tmp_path):
    from coldscope.campaign.ray_exec import run_ray
    store = Store(tmp_path / "s.db")
    spec = parse_spec(fake_spec(tmp_path, repetitions=2, name="onray"))
    cells = expand(spec, tmp_path)
    interrupted = run_ray(spec, cells, store, Reporter(), base=tmp_path,
                          task=crash_first_attempt(str(tmp_path / "crashed")))
    assert not interrupted
    runs = campaign_runs(store, "onray", status=None)
    failed = [r for r in runs if r.status == "failed"]
    ok = [r for r in runs if r.status == "ok"]
    assert len(failed) == 1 and failed[0].reason.startswith("lost: "), failed[0].reason
    assert sorted(r.campaign.cell for r in ok) == sorted(c.id for c in cells)
    assert failed[0].campaign.cell in {c.id for c in cells}
    assert all(r.time_to_ready_s > 0 for r in ok)
    assert not run_processes()


def test_run_campaign_on_ray_and_a_missing_resource(local_ray, tmp_path):
    store = Store(tmp_path / "s.db")
    spec = parse_spec(fake_spec(tmp_path, repetitions=1, name="ray2"))
    result = run_campaign(spec, store, base=tmp_path, executor="ray")
    assert (result.executor, result.done, result.runs_stored) == ("ray", 1, 1)
    (run,) = campaign_runs(store, "ray2")
    assert run.campaign.host and run.status == "ok"
    nowhere = parse_spec({**fake_spec(tmp_path, name="ray3"),
                          "ray": {"resources": {"gpu_node": 1}}})
    with pytest.raises(ColdscopeError, match="no node of the Ray cluster offers resource "
                                             "'gpu_node'"):
        run_campaign(nowhere, store, base=tmp_path, executor="ray")
