"""Reading a command line; ``EngineDefaults``, the command-and-environment role's defaults that
every adapter subclasses; and ``GenericEngine``, the adapter of a command no engine
recognises."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from coldscope.core.records import LogInfo
from coldscope.core.stages import stages_not_applicable

if TYPE_CHECKING:
    from coldscope.engines.roles import CommandSettings


def flag(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``argv``, or None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def module_of(argv: Sequence[str]) -> str | None:
    """The module a ``python -m MODULE`` command line runs (also behind a wrapper such as
    ``taskset -c 0 python -m ...``), or None."""
    for i, a in enumerate(argv[:-1]):
        if a == "-m":
            return argv[i + 1]
    return None


def starts(argv: Sequence[str], package: str, executables: Sequence[str] = ()) -> bool:
    """Whether ``argv`` runs ``package``: ``python -m package[.module]``, one of its console
    scripts (``executables``, by the program's file name), or a Python script inside a
    directory named ``package``. Decided by what the command runs, never by a substring of
    another argument: a model path or a flag value may say anything."""
    if not argv:
        return False
    module = module_of(argv)
    if module is not None:
        return module == package or module.startswith(package + ".")
    program = Path(argv[0]).name
    if program in executables:
        return True
    if not program.startswith("python"):
        return False
    script = next((a for a in argv[1:] if not a.startswith("-")), None)
    return script is not None and script.endswith(".py") and \
        package in Path(script).parent.parts


def options(argv: Sequence[str]) -> dict[str, str]:
    """The ``--name`` options of a command line with their values (``--name V``,
    ``--name=V``; several values up to the next option are joined by spaces; a bare switch has
    the value ""); the program (``argv[0]``) is left out, and words before any option
    (``vllm serve M``) are the option ""."""
    out: dict[str, str] = {}
    name: str | None = None
    words: list[str] = []
    for arg in list(argv)[1:]:
        if arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            if name is not None:
                out[name] = " ".join(words)
            name, _, value = arg.partition("=")
            words = [value] if value else []
        elif name is not None:
            words.append(arg)
        else:
            out[""] = " ".join([*filter(None, [out.get("")]), arg])
    if name is not None:
        out[name] = " ".join(words)
    return out




def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class EngineDefaults:
    """Any command's command line and environment (the ``Engine`` role): what can be said
    without knowing the engine. Adapters subclass it and override what they know; it holds no
    state, so making an adapter runs no code. It reads no log and asks no other adapter."""

    name = "process"
    title = "process"
    packages: Mapping[str, tuple[str, ...]] = {
        "torch": ("torch",), "transformers": ("transformers",), "tokenizers": ("tokenizers",)}
    env_prefixes: tuple[str, ...] = ()
    server_module: str | None = None
    import_breakers: Mapping[str, tuple[str, ...]] = {}
    compile_factors_file: str | None = None

    def matches(self, argv: Sequence[str]) -> bool:
        return True

    def model(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--model")

    def served_model(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--served-model-name") or self.model(argv)

    def host(self, argv: Sequence[str]) -> str | None:
        return flag(argv, "--host")

    def with_host(self, argv: Sequence[str], host: str) -> list[str] | None:
        return None  # an unknown command may not take --host

    def health_url(self, argv: Sequence[str]) -> str:
        host = self.host(argv) or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        port = flag(argv, "--port") or "8000"
        return f"http://{host}:{port}/health"

    def compile_enabled(self, argv: Sequence[str]) -> bool:
        return True

    def capture_sizes(self, argv: Sequence[str]) -> int | None:
        return None

    def describe(self, argv: Sequence[str]) -> CommandSettings:
        return {"name": self.name, "argv": list(argv), "model": self.model(argv),
                "compile": self.compile_enabled(argv)}

    def setting_args(self, *, eager: bool = False, capture_sizes: Sequence[int] | None = None,
                     load_format: str | None = None) -> list[str]:
        asked = [name for name, value in (("enforce_eager", eager),
                                          ("capture_sizes", capture_sizes),
                                          ("load_format", load_format)) if value]
        if asked:
            from coldscope.util.errors import ColdscopeError
            raise ColdscopeError(f"coldscope knows no {self.name} option for "
                                 f"{', '.join(asked)}: give the engine's own flags in args")
        return []

    #: Options that place the server (where it listens, how it logs) and cannot shape what
    #: it compiles; left out of ``compile_key_inputs``.
    PLACEMENT_OPTIONS: frozenset[str] = frozenset({
        "--host", "--port", "--uds", "--api-key", "--root-path", "--log-level",
        "--uvicorn-log-level", "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs"})

    def compile_key_inputs(self, argv: Sequence[str],
                           env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        flags = {k: v for k, v in options(argv).items() if k not in self.PLACEMENT_OPTIONS}
        return flags, {}

    def server_command(self, python: str, args: Sequence[str]) -> list[str]:
        if self.server_module is None:
            from coldscope.util.errors import ColdscopeError
            raise ColdscopeError(f"coldscope does not know how to start {self.name}'s server")
        return [python, "-m", self.server_module, *args]

    def env_defaults(self) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

    def cache_env(self, root: Path) -> dict[str, str]:
        """HOME and the caches every PyTorch engine fills (inductor, Triton, XDG)."""
        return {
            "HOME": str(root / "home"),
            "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
            "XDG_CACHE_HOME": str(root / "xdg"),
            "TRITON_CACHE_DIR": str(root / "triton"),
        }

    def version(self, packages: Mapping[str, str | None], log: LogInfo | None) -> str | None:
        return log.version if log is not None else None

    def not_applicable(self, *, compile_enabled: bool | None, on_cpu: bool,
                       eager: bool | None = None) -> frozenset[str]:
        return stages_not_applicable(compile_enabled=compile_enabled, on_cpu=on_cpu,
                                     eager=eager)


class GenericEngine(EngineDefaults):
    """The adapter of a command no registered engine recognises (``engines.resolve``; a wrapper
    script, say): ``EngineDefaults`` named after the command's program. Its output is read by
    the engine its log shows (``engines.identify_log``)."""

    def __init__(self, argv: Sequence[str] = ()) -> None:
        if argv:
            self.name = self.title = Path(argv[0]).name or "process"
