"""The Ray executor: each wave of cells is one Ray task that holds a whole node.

The only module that imports Ray (an optional extra: ``pip install 'coldscope[ray]'``). A task
asks for one unit of a custom resource that every node advertises once (``coldscope_node`` by
default) or for GPUs, so start-ups on one node never overlap. The task makes missing models on
its node, runs the wave with the same code as the local executor, and returns the records; the
driver stores each as soon as its task returns. A task whose node or worker is lost (any Ray
system error) becomes a failed run in the store, reason ``lost: ...``, and is submitted again,
up to ``ray.max_retries`` times; Ray's own silent retries are off, so every loss is on record.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from coldscope.campaign.execute import (
    ensure_models,
    ensure_releases,
    failed_record,
    reap,
    run_wave,
    state_dir,
)
from coldscope.campaign.matrix import Cell, waves
from coldscope.campaign.progress import Reporter
from coldscope.campaign.spec import CampaignSpec
from coldscope.core.records import Run
from coldscope.launch.runner import Evidence
from coldscope.util.errors import ColdscopeError

if TYPE_CHECKING:
    from ray import ObjectRef

    from coldscope.store.db import Store

#: The waves in flight: each task's result reference -> (its cells, how many times it was lost).
Pending = dict["ObjectRef[list[tuple[Run, Evidence]]]", tuple[list[Cell], int]]
#: Submits a wave as a task again (its cells, the attempt's number).
Submit = Callable[[list[Cell], int], None]


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ColdscopeError("the ray executor needs Ray: pip install 'coldscope[ray]'") from None


def wave_task(wave: list[Cell], spec: CampaignSpec, base: str) -> list[tuple[Run, Evidence]]:
    """Runs on a Ray node: stop engines orphaned by a dead task, make the models and the
    release environments, run."""
    reap(state_dir(spec, Path(base)), spec.shutdown_grace)
    ensure_models(wave)
    ensure_releases(wave)
    return run_wave(wave, spec, Path(base))


def _check_resources(spec: CampaignSpec) -> None:
    import ray

    have = ray.cluster_resources()
    for name, amount in spec.ray.resources.items():
        if have.get(name, 0) < amount:
            raise ColdscopeError(
                f"no node of the Ray cluster offers resource {name!r}; start each node with "
                f"`ray start --resources '{{\"{name}\": 1}}'` or set ray.resources in the file")
    if spec.ray.num_gpus and have.get("GPU", 0) < spec.ray.num_gpus:
        raise ColdscopeError(f"the Ray cluster has no node with {spec.ray.num_gpus:g} GPU(s)")


def _why(exc: Exception) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:300]


def run_ray(spec: CampaignSpec, cells: list[Cell], store: Store, reporter: Reporter, *,
            base: Path, address: str | None = None, concurrency: int = 1,
            task: Callable[[list[Cell], CampaignSpec, str], list[tuple[Run, Evidence]]]
            | None = None) -> bool:
    """Run ``cells`` as Ray tasks, one wave each; store what comes back. Connects to
    ``address`` or, when none and Ray is not yet initialised, starts a local instance that
    advertises the resources once. Returns True when Ctrl-C stopped it."""
    _require_ray()
    import ray

    started_here = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(include_dashboard=False, log_to_driver=False,
                     resources={k: max(v, 1.0) for k, v in spec.ray.resources.items()})
        started_here = True
    try:
        _check_resources(spec)
        remote = ray.remote(task or wave_task).options(
            num_cpus=spec.ray.num_cpus, num_gpus=spec.ray.num_gpus,
            resources=spec.ray.resources, max_retries=0, name="coldscope-campaign-wave")
        pending: Pending = {}

        def submit(wave: list[Cell], attempt: int) -> None:
            pending[remote.remote(wave, spec, str(base))] = (wave, attempt)

        for wave in waves(cells, concurrency):
            submit(wave, 0)
        try:
            _collect(pending, submit, spec, store, reporter)
        except KeyboardInterrupt:
            _cancel(list(pending), spec)
            return True
        return False
    finally:
        if started_here:
            ray.shutdown()


def _collect(pending: Pending, submit: Submit, spec: CampaignSpec, store: Store,
             reporter: Reporter) -> None:
    """Store each task's runs as it returns; record and resubmit lost ones."""
    import ray
    from ray import exceptions as rex

    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in done:
            wave, attempt = pending.pop(ref)
            try:
                results = ray.get(ref)
            except rex.RayTaskError as exc:  # the task itself raised: not worth a retry
                cause = getattr(exc, "cause", None) or exc
                results = [(failed_record(c, f"task error: {_why(cause)}", wave=wave), {})
                           for c in wave]
            except rex.RayError as exc:  # node or worker lost: on record, then again
                results = [(failed_record(c, f"lost: {_why(exc)}", wave=wave), {})
                           for c in wave]
                if attempt < spec.ray.max_retries:
                    reporter.note(f"lost {', '.join(c.id for c in wave)} "
                                  f"({type(exc).__name__}); retry {attempt + 1} of "
                                  f"{spec.ray.max_retries}")
                    submit(wave, attempt + 1)
            by_id = {c.id: c for c in wave}
            for run, evidence in results:
                store.add_run(run, evidence)
                reporter.finished(by_id[run.campaign.cell], run)


def _cancel(refs: list[ObjectRef[list[tuple[Run, Evidence]]]], spec: CampaignSpec) -> None:
    """Ctrl-C: interrupt the running tasks (the runner stops their engines on the
    KeyboardInterrupt Ray raises in them) and wait a little for them to finish."""
    import ray

    for ref in refs:
        try:
            ray.cancel(ref, force=False)
        except Exception:  # already finished or never scheduled
            continue
    ray.wait(refs, num_returns=len(refs), timeout=spec.shutdown_grace + 15)
