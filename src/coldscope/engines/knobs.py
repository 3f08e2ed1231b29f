"""A start-up knob: a named transform of an engine's command line and environment (the record of
the ``TuneCatalogue`` role).

Engines own their catalogue (``coldscope.engines.vllm.knobs`` for vLLM); the tuner only sees
these records, so it stays engine-neutral. A mitigation that the installed engine or this
machine cannot do is kept in the catalogue with ``available=False`` and the reason, so the tune
report shows it as skipped instead of hiding it.

A knob either transforms the command (``env``, ``add_args``, ``remove_args``), asks for caches
(``seed``), or changes how the engine is started (``launcher``: through a standby launcher of
the tune session, ``coldscope standby``); the last two leave the command line as it is.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: ``seed`` value meaning "every cache an earlier start-up of the same configuration left".
ALL_CACHES = "*"


class Knob(BaseModel):
    """One knob. ``env`` is set and ``add_args`` appended (after removing ``remove_args`` and
    any earlier value of the same option); ``seed`` names cache sub-directories (relative to the
    run's cache root, ``*`` for all) that must come from an earlier start-up of the same
    configuration: the platform's pre-seeded image. ``addresses`` are finding ids that point at
    it; ``requires_compile`` marks knobs that only matter while torch.compile is on;
    ``excludes`` names knobs it cannot be combined with; ``subsumed_by`` knobs that already do
    what it does. ``launcher``: start this configuration's engine through a standby launcher
    the tune session keeps (``coldscope.launch.standby``: forked from a process that has
    imported the engine's modules) instead of as a new process; it changes neither the command
    line nor the environment, so the same caches serve both ways (``changes_command`` stays
    False)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    stage: str
    description: str
    tradeoff: str
    env: dict[str, str] = Field(default_factory=dict)
    add_args: tuple[str, ...] = ()
    remove_args: tuple[str, ...] = ()
    seed: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    requires_compile: bool = False
    turns_compile_off: bool = False
    serving_tradeoff: bool = False
    excludes: tuple[str, ...] = ()
    subsumed_by: tuple[str, ...] = ()
    launcher: bool = False
    available: bool = True
    reason: str | None = None
    priority: int = 50

    @property
    def changes_command(self) -> bool:
        """Whether it changes the command line or environment (a seed-only or launcher knob
        does not): what the engine keys its compile cache by."""
        return bool(self.env or self.add_args or self.remove_args)

    def apply(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The command line and environment with this knob applied (pure)."""
        out = _without(list(argv), self.remove_args)
        add = list(self.add_args)
        for i, a in enumerate(add):  # an option added replaces any earlier value of it
            if a.startswith("-"):
                takes_value = i + 1 < len(add) and not add[i + 1].startswith("-") and "=" not in a
                out = _without(out, (a.split("=", 1)[0],), with_value=takes_value)
        return out + add, {**env, **self.env}


def _without(argv: list[str], names: tuple[str, ...], with_value: bool = False) -> list[str]:
    """``argv`` without the options ``names`` (``--x``, ``--x=v`` and, when ``with_value``, a
    following value that does not start with ``-``)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            if not a.startswith("-"):
                continue
        name = a.split("=", 1)[0]
        if name in names:
            skip = with_value and "=" not in a
            continue
        out.append(a)
    return out


def apply_all(mitigations: list[Knob], argv: list[str],
              env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    for m in mitigations:
        argv, env = m.apply(argv, env)
    return argv, env
