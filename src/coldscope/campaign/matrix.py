"""Expanding a campaign into cells: one cell = one measured engine start-up.

Pure: a function of the spec and a base directory, no process, no store. A cell's id is made of
the names of its coordinates (``model/engine/flags/cache/rN``, plus ``@cK`` when K engines start
at once), so the same file expands to the same ids every time and ``--resume`` can tell which
cells are already in the store. Adding a model or a repetition to the file keeps the ids of the
cells that were already there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from coldscope.campaign.spec import CampaignSpec
from coldscope.core.records import Membership
from coldscope.engines import resolve
from coldscope.launch.envs import default_root, slug
from coldscope.synth.tiny_model import ModelShape


class Cell(BaseModel):
    """One start-up to measure. ``command`` still holds ``{port}``: the executor picks the port
    of the slot the cell runs in. Paths are absolute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    campaign: str
    model: str
    model_path: str
    shape: ModelShape | None = None
    engine: str
    flags: str
    cache: Literal["cold", "warm"]
    repetition: int
    concurrency: int
    command: list[str]
    env: dict[str, str]
    release: str | None = None
    """The release spec whose environment (its python in ``command``) must exist first."""
    envs_dir: str | None = None
    """Where that environment lives."""

    def argv(self, port: int) -> list[str]:
        """The engine command for a slot's port."""
        return [a.replace("{port}", str(port)) for a in self.command]

    def tag(self, **more: Any) -> Membership:
        """What a run carries as its membership (``run.campaign``); ``--resume`` reads
        ``cell``. ``more``: the run's role, slot, port, host, ..."""
        return Membership(kind="campaign", name=self.campaign, cell=self.id, model=self.model,
                          engine=self.engine, flags=self.flags, cache=self.cache,
                          repetition=self.repetition, concurrency=self.concurrency, **more)


def cell_id(model: str, engine: str, flags: str, cache: str, repetition: int,
            concurrency: int = 1) -> str:
    cid = f"{model}/{engine}/{flags}/{cache}/r{repetition}"
    return cid if concurrency == 1 else f"{cid}@c{concurrency}"


def model_paths(spec: CampaignSpec, base: Path) -> dict[str, tuple[str, ModelShape | None]]:
    """Model name -> (absolute directory, shape to generate there or None)."""
    models_dir = (base / spec.models_dir).resolve()
    out: dict[str, tuple[str, ModelShape | None]] = {}
    for m in spec.models:
        name = m.resolved_name
        if m.path is not None:
            out[name] = (str((base / m.path).resolve()), None)
        else:
            out[name] = (str(models_dir / name), m.shape)
    return out


def envs_root(base: Path) -> Path:
    """Where release environments live for a campaign in ``base``: ``$COLDSCOPE_ENVS``, else
    ``base/.coldscope/envs`` (absolute, so every node and slot reads the same path)."""
    return (base / default_root()).resolve()


def render_command(command: list[str], model_path: str, python: str) -> list[str]:
    """Fill ``{model}`` and ``{python}``; a bare leading ``python`` also means the engine's
    interpreter. ``{port}`` is left for the executor."""
    argv = [a.replace("{model}", model_path).replace("{python}", python) for a in command]
    if argv and argv[0] == "python":
        argv[0] = python
    return argv


def expand(spec: CampaignSpec, base: Path, concurrency: int | None = None) -> list[Cell]:
    """All cells of the campaign, repetition-major: every cell's first repetition before any
    second one, so slow drift of the machine spreads over all cells and a campaign stopped
    half-way still has something of each. ``concurrency`` overrides the file's."""
    conc = concurrency or spec.concurrency
    models = model_paths(spec, base)
    envs_dir = envs_root(base)
    cells = []
    for rep in range(1, spec.repetitions + 1):
        for m in spec.models:
            name = m.resolved_name
            path, shape = models[name]
            for engine in spec.engines:
                for flags in spec.flags:
                    python = engine.python if engine.release is None else \
                        str(envs_dir / slug(engine.release) / "bin" / "python")
                    rendered = render_command(spec.command, path, python)
                    command = rendered + flags.argv(resolve(rendered))
                    for cache in spec.cache:
                        cells.append(Cell(
                            id=cell_id(name, engine.name, flags.name, cache, rep, conc),
                            campaign=spec.name, model=name, model_path=path, shape=shape,
                            engine=engine.name, flags=flags.name, cache=cache, repetition=rep,
                            concurrency=conc, command=command,
                            env={**spec.env, **engine.env}, release=engine.release,
                            envs_dir=str(envs_dir) if engine.release else None,
                        ))
    return cells


def missing(cells: list[Cell], done: set[str]) -> list[Cell]:
    """The cells without a successful run, in plan order."""
    return [c for c in cells if c.id not in done]


def waves(cells: list[Cell], size: int) -> list[list[Cell]]:
    """Cells in groups started together (size 1: one at a time)."""
    return [cells[i:i + size] for i in range(0, len(cells), size)]
