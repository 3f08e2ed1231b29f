"""Tune sessions as waterfalls: the baseline, each change the search kept, the best, with the
seconds each change saved per stage, and every ratio against the warm default (the default
run again on its own caches: the reference tune judges the winner by) with its 95 % interval.

Which changes a session kept comes from its session file, through tune's own
``coldscope.tuning.report.waterfall`` (``KeptSteps``, read by ``coldscope.report.build``);
without the file, they are inferred from the runs. The numbers come from the stored runs: each
configuration's mean over its measuring start-ups, the numbers the search judged it by (tune's
waterfall gives one start-up per row), so the first and last rows equal the session's baseline
and best and the steps' savings add up, stage by stage, from one to the other. The ratios are
computed from the stored runs as tune computes them (``compare.ratio_interval`` over the same
start-ups), so the best's equal the session's own ``vs_warm``, ``vs_cold`` and throughput ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from coldscope.analysis.comparison import Ratio, ratio_interval
from coldscope.core.records import Run
from coldscope.core.stages import BUCKETS
from coldscope.report.markup import CsvValue, csv_link, figure, key, legend, table
from coldscope.report.svg import Linear, Svg, fill, nice_ticks
from coldscope.report.text import esc, fmt_s, fmt_x, label, text_width
from coldscope.util.errors import ColdscopeError

#: Roles of a tune session's start-ups that measure their configuration as the search judged
#: it; a ``prime`` start-up is the cold run that leaves a seeded configuration its caches.
TUNE_MEASURING_ROLES = ("baseline", "warm", "trial", "repeat", "confirm")


@dataclass(frozen=True)
class KeptSteps:
    """What a tune session's file says: the configurations it kept, in order (knob lists, the
    first the baseline's ``()``), what each knob does, the warm default's start-ups the search
    measured the winner against (``warm_runs``: tune's ``warm_reference``), and the state its
    cold start-ups had (``cold_state``: tune's ``cold_state``, e.g. the page cache evicted)."""

    steps: tuple[tuple[str, ...], ...]
    descriptions: dict[str, str]
    warm_runs: tuple[str, ...] = ()
    cold_state: str | None = None


@dataclass(frozen=True)
class TuneStep:
    """One kept configuration: means over its measuring start-ups (``runs``), and against the
    previous step the seconds ``saved`` per stage and in total (negative: slower; None for the
    baseline). ``change``: the knob this step added; ``throughput_vs_warm``: its start-ups'
    serving throughput over the warm default's (each start-up's median round; Fieller
    interval), None for the warm default itself (``reference``) or when not measured."""

    name: str
    change: str | None
    knobs: tuple[str, ...]
    description: str | None
    runs: tuple[str, ...]
    n: int
    time_to_ready_s: float
    stages: dict[str, float]
    saved: dict[str, float] | None
    saved_s: float | None
    throughput: float | None
    throughput_vs_warm: Ratio | None
    reference: bool = False


@dataclass(frozen=True)
class Waterfall:
    """One session's steps, from the baseline to the best. ``inferred``: its kept changes were
    read from the runs (no session file); ``runs``: its start-ups among those reported on.
    ``vs_warm`` and ``vs_cold``: the best's speed-ups (time to ready) against the warm
    default's start-ups (``warm_runs`` of them; None when the best is the warm default,
    ``best_is_warm``) and the
    cold default's, with their intervals; ``cold_state``: what the cold start-ups had, from the
    session file (None without it)."""

    session: str
    inferred: bool
    runs: int
    steps: tuple[TuneStep, ...]
    baseline_s: float
    best_s: float
    best_knobs: tuple[str, ...]
    vs_warm: Ratio | None
    vs_cold: Ratio | None
    warm_runs: int
    cold_state: str | None
    best_is_warm: bool = False


@dataclass(frozen=True)
class Tune:
    """A waterfall per tune session among the runs, and a note for each that cannot be drawn
    or whose kept changes were inferred from the runs."""

    waterfalls: tuple[Waterfall, ...]
    notes: tuple[str, ...]


def tune_runs(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """The runs of each tune session (``campaign.kind == "tune"``), by session id, in order of
    first appearance."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        m = r.campaign
        if m is not None and m.kind == "tune" and m.name:
            out.setdefault(m.name, []).append(r)
    return out


def tune_knobs(run: Run) -> tuple[str, ...]:
    """The knobs a tune start-up applied, in order (its membership's ``flags``)."""
    flags = run.campaign.flags if run.campaign else None
    return () if not flags or flags == "default" else tuple(flags.split("+"))


def inferred_tune_steps(runs: Sequence[Run]) -> list[tuple[str, ...]]:
    """The configurations a session kept, read from its runs alone (when its session file is
    gone): every trial, repeat or prime tries one knob on top of the configuration kept so far,
    and the confirm re-measures the final one. The runs cannot tell whether the session's last
    trial was kept when no confirm followed it; then it is left out."""
    incumbents: set[tuple[str, ...]] = {()}
    for r in runs:
        role, knobs = (r.campaign.role if r.campaign else None), tune_knobs(r)
        if role in ("confirm", "warm"):
            incumbents.add(knobs)
        elif role in ("trial", "repeat", "prime") and knobs:
            incumbents.add(knobs[:-1])
    chain: list[tuple[str, ...]] = []
    for knobs in sorted(incumbents, key=len):
        if not chain or (len(knobs) > len(chain[-1]) and knobs[:len(chain[-1])] == chain[-1]):
            chain.append(knobs)
    return chain


def _throughput(run: Run) -> float | None:
    v = (run.verification or {}).get("throughput")
    return float(v) if isinstance(v, int | float) and v > 0 else None


def _throughputs(runs: Iterable[Run]) -> list[float]:
    return [t for t in (_throughput(r) for r in runs) if t is not None]


def _times(runs: Iterable[Run]) -> list[float]:
    return [r.time_to_ready_s for r in runs if r.time_to_ready_s is not None]


def _warm_reference(runs: Sequence[Run], kept: KeptSteps | None) -> list[Run]:
    """The warm default's start-ups every ratio is taken against: those the session file
    names (the ones tune measured the winner against), else every successful ``warm`` one."""
    ok = [r for r in runs if r.status == "ok" and r.time_to_ready_s is not None
          and r.campaign is not None and r.campaign.role == "warm"]
    if kept is not None and kept.warm_runs:
        named = set(kept.warm_runs)
        return [r for r in ok if r.id in named]
    return ok


def waterfall(session: str, runs: Sequence[Run], kept: KeptSteps | None = None) -> Waterfall:
    """One tune session as a waterfall: the baseline, one step per kept change, the best.

    ``kept``: what the session file says (without it the steps are ``inferred_tune_steps``).
    Each configuration's time to ready and stages are means over its measuring start-ups (not
    its ``prime``), so the baseline's and the best's equal the session's ``baseline_s`` and
    ``best_s``. Because every run's stages sum to its time to ready, a step's per-stage seconds
    saved sum to its saving, and the steps' savings sum, stage by stage, from the baseline to
    the best. The best configuration is measured by its confirmation start-ups when it has any
    (not by the trials that selected it); a step measured only by the default's warm start-ups
    is named ``warm caches (the default run again)``. Raises ``ColdscopeError`` when a kept
    configuration has no successful run among ``runs`` (e.g. a ``--runs`` selection left it
    out).

    Every ratio is against the warm default's start-ups (those the session file names, the
    ones tune judged the winner by; else every ``warm`` one), taken as tune takes it
    (``ratio_interval`` of each start-up's median serving round; of times to ready for the
    best's speed-ups), so that a session's figures read the same here as in ``tune``.
    """
    chosen = list(inferred_tune_steps(runs) if kept is None else kept.steps)
    if not chosen or chosen[0] != ():
        chosen.insert(0, ())
    descriptions = kept.descriptions if kept else {}
    out: list[TuneStep] = []
    warm = _warm_reference(runs, kept)
    warm_tp = _throughputs(warm)
    for i, knobs in enumerate(chosen):
        rs = [r for r in runs if r.status == "ok" and r.time_to_ready_s is not None
              and tune_knobs(r) == knobs and r.campaign is not None
              and r.campaign.role in TUNE_MEASURING_ROLES]
        confirmed = [r for r in rs if r.campaign is not None and r.campaign.role == "confirm"]
        if i == len(chosen) - 1 and confirmed:  # the best, by the runs that did not choose it
            rs = confirmed
        if not rs:
            what = "+".join(knobs) or "the baseline"
            raise ColdscopeError(f"tune session {session}: no successful run of {what} among "
                                 "the chosen runs")
        stages = {b: statistics.fmean([r.stages.get(b) or 0.0 for r in rs]) for b in BUCKETS}
        ttr = statistics.fmean([r.time_to_ready_s or 0.0 for r in rs])
        tps = _throughputs(rs)
        tp = statistics.fmean(tps) if tps else None
        prev = out[-1] if out else None
        before = prev.knobs if prev else ()
        change = None if i == 0 else (knobs[-1] if knobs[:-1] == before else
                                      "+".join(k for k in knobs if k not in before) or None)
        warm_only = all(r.campaign is not None and r.campaign.role == "warm" for r in rs)
        out.append(TuneStep(
            name="baseline" if i == 0 else "warm caches (the default run again)" if warm_only
            else (change or "+".join(knobs)), change=change, knobs=knobs,
            description=descriptions.get(change) if change else None,
            runs=tuple(r.id for r in rs), n=len(rs), time_to_ready_s=ttr, stages=stages,
            saved=None if prev is None else {b: prev.stages[b] - stages[b] for b in BUCKETS},
            saved_s=None if prev is None else prev.time_to_ready_s - ttr,
            throughput=tp,
            throughput_vs_warm=ratio_interval(tps, warm_tp) if tps and warm_tp
            and not warm_only else None,
            reference=warm_only,
        ))
    base, best = out[0], out[-1]
    best_runs = [r for r in runs if r.id in set(best.runs)]
    best_is_warm = best.reference or any(tune_knobs(r) == best.knobs for r in warm)
    return Waterfall(
        session=session, inferred=kept is None, runs=len(runs), steps=tuple(out),
        baseline_s=base.time_to_ready_s, best_s=best.time_to_ready_s, best_knobs=best.knobs,
        vs_warm=ratio_interval(_times(warm), _times(best_runs)) if warm and not best_is_warm
        else None,
        vs_cold=ratio_interval(_times(r for r in runs if r.id in set(base.runs)),
                               _times(best_runs)) if len(out) > 1 else None,
        warm_runs=len(warm), cold_state=kept.cold_state if kept else None,
        best_is_warm=best_is_warm)


def build(runs: Sequence[Run], sessions: Mapping[str, KeptSteps] | None = None) -> Tune:
    """A ``waterfall`` for every tune session among ``runs``; ``sessions``: session id ->
    what its file says it kept."""
    sessions = sessions or {}
    out, notes = [], []
    for sid, rs in tune_runs(runs).items():
        try:
            w = waterfall(sid, rs, sessions.get(sid))
        except ColdscopeError as exc:
            notes.append(f"{exc}: its waterfall is left out")
            continue
        if w.inferred:
            notes.append(f"tune session {sid}: no session file, so its kept changes are read "
                         "from the runs (a last trial with no confirm after it is left out)")
        out.append(w)
    return Tune(waterfalls=tuple(out), notes=tuple(notes))


def _interval_x(r: Ratio) -> str:
    """A ratio with its 95 % interval: ``2.71× [2.30×, 3.12×]``."""
    if r.low is None or r.high is None:
        return f"{fmt_x(r.value)} (no interval)"
    return f"{fmt_x(r.value)} [{fmt_x(r.low)}, {fmt_x(r.high)}]"


def _throughput_x(step: TuneStep) -> str:
    """A step's serving throughput against the warm default's, with its interval."""
    r = step.throughput_vs_warm
    if step.reference:
        return "the reference"
    return "not measured" if r is None or r.value is None else _interval_x(r)


def _ratio_text(step: TuneStep) -> str:
    x = _throughput_x(step)
    return f"throughput: {x}" if step.reference or x == "not measured" else \
        f"throughput {x} vs warm default"


def cold_label(state: str | None) -> str:
    """What the speed-up against the cold default is against (tune's ``cold_label``): a new
    node only when the session file says its cold start-ups had a new node's page cache."""
    from coldscope.tuning.report import cold_label as label_of
    return label_of(state)


def chart(w: Waterfall, title: str) -> str:
    """A waterfall of one tune session, one row per configuration, top to bottom: the
    baseline's stacked stages from launch to its time to ready; then, per kept change, the
    seconds it saved, stacked by stage leftwards from the previous time to ready (a thin bar
    under it adds back the stages it made slower), so each step ends at that configuration's
    time to ready, carried down by a dashed line; last, the best configuration's stacked
    stages. Names and throughput ratios sit left of the plot, seconds right of each bar."""
    steps = w.steps
    rows = [("baseline", steps[0]), *(("step", s) for s in steps[1:]), ("best", steps[-1])]
    names, values = [], []
    for kind, s in rows:
        if kind == "baseline":
            names.append(("baseline (default, cold)", f"n={s.n} start-up(s)"))
            values.append(fmt_s(s.time_to_ready_s))
        elif kind == "best":
            names.append((f"best: {len(steps) - 1} change(s)", _ratio_text(s)))
            vs = w.vs_warm
            values.append(f"{fmt_s(s.time_to_ready_s)} · " + (
                "the warm default itself" if w.best_is_warm else
                f"{_interval_x(vs)} faster than warm default"
                if vs is not None and vs.value is not None else "vs warm default not measured"))
        else:
            saved_s = s.saved_s or 0.0
            names.append((f"+ {s.name}", _ratio_text(s)))
            values.append(f"{'−' if saved_s >= 0 else '+'}{fmt_s(abs(saved_s))} → "
                          f"{fmt_s(s.time_to_ready_s)}")
    label_w = max(150, min(300, max(text_width(t, 12) for pair in names for t in pair)))
    value_w = max(text_width(v, 11.5) for v in values) + 12
    width, bar_h, cost_h, pitch = 980, 20, 6, 42
    left, right, top = label_w + 16, value_w, 10
    base = top + len(rows) * pitch
    height = base + 46
    hi = max(max(s.time_to_ready_s for s in steps),
             max(sum(v for v in s.stages.values() if v > 0) for s in steps))
    ticks = nice_ticks(0, hi)
    x = Linear(0, ticks[-1], left, width - right)
    svg = Svg(width, height, title)
    svg.x_axis(x, ticks, base, top,
               "seconds from launch to ready (mean of each configuration's start-ups)")
    prev_end: float | None = None
    for i, ((kind, s), (name, sub), value) in enumerate(zip(rows, names, values, strict=True)):
        y = top + i * pitch
        svg.text(left - 8, y + 10, name, anchor="end", cls="label strong")
        svg.text(left - 8, y + 26, sub, anchor="end", cls="tick")
        saved = s.saved if kind == "step" else None
        if saved is None or prev_end is None:  # the baseline's and the best's stages
            t = 0.0
            for b in BUCKETS:
                v = s.stages.get(b) or 0.0
                if v <= 0.005:
                    continue
                tip = f"{name}\n{label(b)}: {fmt_s(v)} (mean of {s.n} start-up(s))"
                svg.rect(x(t), y, x(t + v) - x(t), bar_h, fill(b), tip, cls="mark seg")
                t += v
            right_end = max(t, s.time_to_ready_s)
        else:
            start = prev_end
            t = start
            for b in BUCKETS:  # savings, leftwards from the previous time to ready
                v = saved[b]
                if v > 0.005:
                    tip = (f"{s.name}: {label(b)} saved {fmt_s(v)} "
                           f"({fmt_s(s.stages[b] + v)} → {fmt_s(s.stages[b])})")
                    svg.rect(x(t - v), y, x(t) - x(t - v), bar_h, fill(b), tip,
                             cls="mark seg")
                    t -= v
            for b in BUCKETS:  # costs, added back rightwards on a thin bar
                v = -saved[b]
                if v > 0.005:
                    tip = (f"{s.name}: {label(b)} {fmt_s(v)} slower "
                           f"({fmt_s(s.stages[b] - v)} → {fmt_s(s.stages[b])})")
                    svg.rect(x(t), y + bar_h + 1, x(t + v) - x(t), cost_h, fill(b), tip,
                             cls="mark seg cost")
                    t += v
            right_end = max(start, s.time_to_ready_s)
        if prev_end is not None:
            # the previous configuration's time to ready, carried down to this row
            svg.line(x(prev_end), y - pitch + bar_h + cost_h + 2, x(prev_end), y, cls="one")
        prev_end = s.time_to_ready_s
        svg.text(x(right_end) + 6, y + bar_h / 2 + 4, value, cls="value")
    return str(svg)


def draw(section: Tune) -> str:
    """One waterfall figure per tune session, with its table and CSV."""
    parts = []
    for i, w in enumerate(section.waterfalls):
        steps = w.steps
        shown = [b for b in BUCKETS if any(abs((s.saved or {}).get(b) or 0.0) >= 0.05
                                           for s in steps)]
        trows = []
        csv_rows: list[dict[str, CsvValue]] = []
        for j, s in enumerate(steps):
            saved = s.saved or {}
            tp = s.throughput_vs_warm
            trows.append([
                esc("baseline (default, cold)" if j == 0 else f"+ {s.name}"),
                str(s.n),
                *(fmt_s(saved.get(b), "") if j else "" for b in shown),
                fmt_s(s.saved_s, "") if j else "",
                esc(_throughput_x(s)),
                f"<b>{fmt_s(s.time_to_ready_s, '')}</b>",
                esc(s.description or ("the command as given, cold caches" if j == 0
                                      else "")),
            ])
            row: dict[str, CsvValue] = {
                "session": w.session, "step": s.name, "knobs": "+".join(s.knobs),
                "runs": " ".join(s.runs), "n": s.n, "time_to_ready_s": s.time_to_ready_s,
                "saved_s": s.saved_s, "throughput_tokens_per_s": s.throughput,
                "throughput_vs_warm": tp.value if tp else None,
                "throughput_vs_warm_low": tp.low if tp else None,
                "throughput_vs_warm_high": tp.high if tp else None}
            for b in BUCKETS:
                row[f"{b}_s"] = s.stages[b]
                row[f"{b}_saved_s"] = saved.get(b)
            csv_rows.append(row)
        columns = ["step", "runs", *(f"{label(b)} saved s" for b in shown), "saved s",
                   "throughput vs warm default (95 % interval), ratio", "time to ready s",
                   "what it does"]
        tbl = table(columns, trows, numeric_to=len(columns) - 1,
                    caption="mean over each configuration's start-ups; saved: previous step "
                            "minus this one (negative: slower); throughput: serving tokens/s "
                            f"over the warm default's ({w.warm_runs} start-up(s), each its "
                            "median round), with its 95 % Fieller interval")
        title = (f"Tune session {w.session}: {fmt_s(w.baseline_s)} → "
                 f"{fmt_s(w.best_s)} to ready")
        said = [f"{_interval_x(r)} {what}" for r, what in
                ((w.vs_warm, "vs running the default again"),
                 (w.vs_cold, cold_label(w.cold_state)))
                if r is not None and r.value is not None]
        if said:
            title += "; best " + "; ".join(said)
        drawn = [b for b in BUCKETS if any(
            abs((s.saved or {}).get(b) or 0.0) > 0.005 or (s.stages.get(b) or 0.0) > 0.005
            for s in steps)]
        keys = legend(drawn, [
            key("stage made slower by the change (thin bar, adds back)",
                "background:#8c8c8c;height:5px", ""),
            key("time to ready carried to the next step", "border-color:#1f2430", "dash")])
        note = ("Top to bottom: the baseline's stages (seconds, mean of its start-ups); each "
                "change the search kept, as the seconds it saved per stage, from the previous "
                "time to ready down to its own; the best configuration's stages. Each row names "
                "the change and its serving throughput as a ratio to the warm default's (the "
                "default run again on its own caches, the reference tune judges the winner by), "
                "with its 95 % interval. "
                + ("The kept changes come from the session file. " if not w.inferred else
                   "No session file: the kept changes are read from the runs. ")
                + f"{w.runs} start-ups in the session; the ones not kept, and the cold "
                  "start-ups that primed a seeded configuration, are in the runs table.")
        parts.append(figure(f"tune-{i + 1}", title, chart(w, title), tbl,
                            csv_link(f"tune-{i + 1}.csv", csv_rows), keys=keys, note=esc(note)))
    return "".join(parts)
