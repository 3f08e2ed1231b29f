"""``coldscope tune`` on a terminal: functions of a finished ``TuneResult`` (or, while the
search runs, of the session and its start-ups), returning rich renderables; ``render(result)``
draws a ``TuneResult`` with ``tune_tables``.

The result leads with the two answers (against running the default again, against the
default started cold: a new node when its page cache was evicted, ``cold_label``), then the
trial table, the knobs not tried, and the winner as a ready command line and environment.
Text from the session (knob names, reasons, the engine's greedy output, the command) enters as
``terminal.plain``: never read as markup, cleaned of control sequences.
"""

from __future__ import annotations

import shlex
import statistics

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coldscope.render import render
from coldscope.tuning.report import TuneResult, VsBaseline, cold_label
from coldscope.tuning.search import Measurement, TrialRequest
from coldscope.tuning.session import SessionSpec
from coldscope.tuning.verify import ROUNDS
from coldscope.util.terminal import plain


def _times(r: VsBaseline | None) -> str:
    if r is None or r.value is None:
        return "not measured"
    iv = f" [{r.low:.2f}x, {r.high:.2f}x]" if r.low is not None and r.high is not None else \
        " (no interval: fewer than 2 start-ups a side)"
    return f"{r.value:.2f}x{iv}"


def _s(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds:.1f}"


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{100 * (ratio - 1):+.0f} %"


def headline_lines(result: TuneResult) -> list[str]:
    """The two answers first: against running the default again (warm caches), and against the
    default on empty caches (a new node when the page cache was evicted, else a warm machine:
    ``cold_label`` of ``baselines.cold_state``); then how the figures were measured and, with
    the stored runs, the stages the winner's seconds come from."""
    best = f"{result.best.time_to_ready_s:.1f} s"
    vs_warm, vs_cold = result.speedup.vs_warm, result.speedup.vs_cold
    lines = []
    if vs_warm is not None and vs_warm.baseline:
        lines.append(f"vs running the default again (warm caches, {len(vs_warm.baseline)} "
                     f"start-ups): {_times(vs_warm)} faster, "
                     f"{statistics.fmean(vs_warm.baseline):.1f} s -> {best}")
    elif vs_warm is not None:  # no warm start-up apart from the winner's own
        lines.append(f"vs running the default again: {vs_warm.note or _times(vs_warm)}")
    new_node = "with its caches shipped (coldscope bundle)" if result.best.seeded_caches else ""
    state = result.baselines.cold_state
    lines.append(f"{cold_label(state)} (default, {len(vs_cold.baseline)} cold start-ups): "
                 f"{_times(vs_cold)} faster, {_s(result.baselines.cold.time_to_ready_s)} s -> "
                 f"{best} {new_node}".rstrip())
    lines.append(f"  (the cold start-ups: {state})")
    if result.best.seeded_caches and result.best.cold_time_to_ready_s is not None:
        lines.append(f"  (the winner without its caches started in "
                     f"{result.best.cold_time_to_ready_s:.1f} s, one start-up)")
    how = (f"interleaved confirmation start-ups ({len(result.best.runs)} of the winner), "
           "not the trials that chose it" if result.best.confirmed
           else "the trials that chose the winner: no budget was left to confirm it")
    lines.append(f"95 % intervals (Fieller); the winner's figures come from {how}")
    cmp = result.comparison
    if cmp is not None:
        resolved = sorted(((name, row) for name, row in cmp.stages.items()
                           if row.verdict != "unresolved"),
                          key=lambda kv: kv[1].delta if kv[1].delta is not None else 0.0)
        said = [f"{name} {row.delta:+.1f} s [{row.low:+.1f}, {row.high:+.1f}]"
                for name, row in resolved]
        lines.append("where it comes from, vs the warm default (resolved stages): "
                     + ("; ".join(said) if said else "no stage resolved"))
    return lines


def headline(result: TuneResult) -> Text:
    """``headline_lines`` as one bold block."""
    return plain("\n".join(headline_lines(result)), style="bold")


def trials_table(result: TuneResult) -> Table:
    """One row per start-up: its role, the change under test, the caches it started from,
    its time to ready, the stages that moved most against the configuration it was measured
    against, its serving throughput and greedy output against the default's, and the verdict."""
    t = Table(title=f"tune {result.session}: {result.used} of {result.budget} start-ups "
                    f"({result.stopped}); noise ±{100 * result.spread:.0f} %",
              title_justify="left", box=box.SIMPLE_HEAVY)
    for c in ("#", "role", "change", "caches", "ready s", "stage Δ s", "throughput Δ",
              "greedy", "kept", "why"):
        t.add_column(c, overflow="fold")
    for r in result.trials:
        deltas = sorted(r.stage_delta.items(), key=lambda kv: abs(kv[1]), reverse=True)[:3]
        t.add_row(
            str(r.trial + 1), r.role, plain(r.change or "+".join(r.knobs) or "default"), r.cache,
            f"{r.time_to_ready_s:.1f}" if r.time_to_ready_s is not None else "failed",
            plain(", ".join(f"{k} {v:+.1f}" for k, v in deltas)),
            _pct(r.throughput_ratio),
            "" if r.greedy_match is None else ("same" if r.greedy_match
                                               else plain(f"differs: {r.greedy_diff}")),
            {True: "yes", False: "no", None: ""}[r.kept],
            plain(r.reason or ""),
        )
    return t


def skipped_table(result: TuneResult) -> Table | None:
    """The knobs not tried, and why (None when every knob was tried)."""
    if not result.skipped:
        return None
    s = Table(title="not tried", title_justify="left", box=box.SIMPLE)
    s.add_column("knob")
    s.add_column("why")
    for k in result.skipped:
        s.add_row(plain(k.knob), plain(k.reason))
    return s


def winner(result: TuneResult) -> Text:
    """The winner: its knobs, its serving throughput and greedy output against the default,
    and the command line and environment to start it with."""
    best = result.best
    lines = [f"best: {'+'.join(best.knobs) or 'the default'}"]
    tp = best.throughput_ratio
    if tp is not None and tp.value is not None:
        iv = f" [{100 * (tp.low - 1):+.0f} %, {100 * (tp.high - 1):+.0f} %]" \
            if tp.low is not None and tp.high is not None else " (no interval)"
        lines.append(f"serving throughput {_pct(tp.value)}{iv} vs the warm default "
                     f"({len(tp.best)} vs {len(tp.baseline)} start-ups, median of {ROUNDS} "
                     "rounds each)")
    lim = best.throughput_limit
    if lim is not None:
        verdict = {True: "holds", False: "NOT shown to hold",
                   None: lim.note or "not measured"}[lim.holds]
        lines.append(f"--max-throughput-loss {100 * lim.max_loss:.0f} %: {verdict} (judged on "
                     "the interval's low end)")
    if best.greedy_match is not None:
        lines.append("greedy output: " + ("the baseline's" if best.greedy_match else
                                          "DIFFERS from the baseline's" +
                                          (" (allowed by --allow-output-change)"
                                           if best.output_change_allowed else "")))
    lines.append("command: " + shlex.join(best.argv))
    if best.env:
        lines.append("environment: " + " ".join(f"{k}={shlex.quote(v)}"
                                                for k, v in best.env.items()))
    if best.seeded_caches:
        lines.append(f"needs its caches pre-seeded: coldscope bundle --tune {result.session} -o "
                     "caches.tar.gz, then profile/tune --bundle caches.tar.gz")
    lines.extend(f"note: {n}" for n in result.notes)
    return plain("\n".join(lines), style="bold")


@render.register
def tune_tables(result: TuneResult) -> Group:
    """``coldscope tune``: the whole result, in printing order: the headline, the trials, the
    knobs not tried, the winner."""
    skipped = skipped_table(result)
    parts: list[RenderableType] = [headline(result), trials_table(result)]
    if skipped is not None:
        parts.append(skipped)
    parts.append(winner(result))
    return Group(*parts)


def session_banner(spec: SessionSpec) -> Text:
    """The line a session opens with: its id, its budget and the knobs available here."""
    return Text.assemble(("coldscope tune", "bold"),
                         plain(f" session {spec.id}: budget {spec.budget} start-ups; "
                               f"{sum(k.available for k in spec.knobs)} of {len(spec.knobs)} "
                               "knobs available here"))


def startup_line(req: TrialRequest, m: Measurement, replayed: bool, budget: int) -> str:
    """One finished (or, on resume, replayed) start-up, as the progress line under the
    banner."""
    what = "replayed" if replayed else ("ok" if m.ok else f"failed: {m.reason}")
    t = f"{m.time_to_ready_s:.1f} s" if m.time_to_ready_s is not None else "-"
    return (f"  start-up {req.index + 1}/{budget}: {req.role} {'+'.join(req.knobs) or 'default'}"
            f"{' (seeded caches)' if req.seeded else ''}: {t} [{what}]")
