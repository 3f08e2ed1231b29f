"""Entry point of the ``coldscope`` command.

Sub-commands live in their own modules and are imported only when invoked, so that a quick
command (``predict``) does not pay for the imports of a heavy one (``profile``).
To add a command, add one line to ``COMMANDS``:
name -> ("module:attribute" of a click command, one-line help shown by ``coldscope --help``).
"""

from __future__ import annotations

import importlib
import sys

import click

from coldscope.core.version import __version__
from coldscope.util.errors import ColdscopeError

COMMANDS: dict[str, tuple[str, str]] = {
    "campaign": ("coldscope.cli.campaign:campaign",
                 "Profile a matrix of models x flags x cache states (local or Ray)."),
    "compare": ("coldscope.cli.compare:compare_cmd",
                "Is b faster than a? Stage by stage, interleaved, with intervals."),
    "calibrate": ("coldscope.cli.predict:calibrate_cmd",
                  "Move a startup model to a new machine from two start-ups there."),
    "features": ("coldscope.cli.predict:features_cmd", "Model features, no weights loaded."),
    "fit": ("coldscope.cli.predict:fit_cmd", "Fit the per-stage startup model."),
    "predict": ("coldscope.cli.predict:predict_cmd", "Predict start-up per stage, with intervals."),
    "profile": ("coldscope.cli.profile:profile", "Profile a real engine start-up into six stages."),
    "runs": ("coldscope.cli.profile:runs", "List the stored runs, one line each."),
    "show": ("coldscope.cli.profile:show", "Show one run's timeline."),
    "parse": ("coldscope.cli.profile:parse",
              "Timelines from saved engine logs (vLLM, SGLang): files, dirs, -, .gz."),
    "trace": ("coldscope.cli.profile:trace", "Export a run as a Chrome trace / Perfetto file."),
    "export": ("coldscope.cli.profile:export", "Export the store to CSV or Parquet."),
    "demo": ("coldscope.cli.profile:demo", "Profile the tiny local model cold, then warm."),
    "make-model": ("coldscope.cli.models:make_model", "Make a small random-weight model locally."),
    "plan": ("coldscope.cli.plan:plan_cmd", "Cold-start budget, mitigations, cost, SLA."),
    "simulate": ("coldscope.cli.simulate:simulate",
                 "Simulate autoscaling with cold starts over a request trace."),
    "traces": ("coldscope.cli.traces:traces", "Request traces: synthesise (synth)."),
    "releases": ("coldscope.cli.releases:releases",
                 "Start-up across engine releases, interleaved, with intervals."),
    "report": ("coldscope.cli.report:report", "Write a self-contained HTML report of the runs."),
    "tune": ("coldscope.cli.tune:tune", "Find and prove the fastest start-up of a command."),
    "bundle": ("coldscope.cli.tune:bundle", "Pack the caches a tuned configuration relies on."),
    "serve": ("coldscope.cli.serve:serve", "Serve start-up metrics, runs, predictions, hints."),
    "standby": ("coldscope.cli.standby:standby",
                "Keep an engine's modules imported, ready to fork a start-up."),
    "schema": ("coldscope.cli.schema:schema", "Print the JSON Schema of run/plan/simulate/model."),
}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing commands must not import them all: use the static one-line help.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="coldscope")
def cli() -> None:
    """Measure, explain, cut, predict and plan the cold start of LLM inference servers."""


#: Longest error line printed: a message quoting a hostile input (a 60 MB model name, a
#: 4,000-digit number) is cut here rather than flooding the terminal.
MAX_ERROR_CHARS = 1000


def error_line(message: str) -> str:
    """``message`` as one printable line: control sequences (from a log, a file name, a store)
    removed, line breaks joined, cut to ``MAX_ERROR_CHARS``."""
    from coldscope.util.safeio import clean_text
    line = " ".join(clean_text(message).split("\n")).replace("\t", " ")
    if len(line) > MAX_ERROR_CHARS:
        line = line[:MAX_ERROR_CHARS - 1] + "…"
    return line


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit code 2, never a traceback."""
    try:
        cli.main(args=argv, prog_name="coldscope", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"error: {error_line(exc.format_message())}", err=True)
        return exc.exit_code if exc.exit_code else 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except ColdscopeError as exc:
        click.echo(f"error: {error_line(str(exc))}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
