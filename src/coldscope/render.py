"""Human renderings of stored runs (rich tables). Functions of run records only."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from coldscope.stages import BUCKETS, STAGES


def _fmt(v: float | None, na: bool = False) -> str:
    if v is None:
        return "n/a" if na else "unknown"
    return f"{v:8.2f}"


def _short(record: dict) -> str:
    return f"{record['id']} ({record.get('cache') or '?'})"


def timeline_table(record: dict, *, substeps: bool = True) -> Group:
    """The six stages, server_ready and unattributed of one run, with sub-steps and sources."""
    ttr = record.get("time_to_ready_s")
    na = set(record.get("not_applicable") or [])
    title = f"run {_short(record)}"
    if ttr is not None:
        title += f" — ready in {ttr:.2f} s"
        if record.get("first_token_s") is not None:
            title += f", first token at {record['first_token_s']:.2f} s"
    table = Table(box=box.SIMPLE_HEAVY)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    table.add_column("source")
    stages = record.get("stages") or {}
    subs = record.get("substeps") or {}
    for bucket in BUCKETS:
        v = stages.get(bucket)
        share = f"{100 * v / ttr:5.1f} %" if v is not None and ttr else ""
        table.add_row(bucket, _fmt(v, bucket in na), share,
                      (record.get("sources") or {}).get(bucket, ""))
        if substeps:
            for name, sv in sorted(subs.items()):
                if name.split("/", 1)[0] == bucket:
                    table.add_row(Text("  └ " + name.split("/", 1)[1], style="dim"),
                                  Text(f"{sv:8.2f}", style="dim"), "", "")
    if ttr is not None:
        table.add_row(Text("time to ready", style="bold"), Text(f"{ttr:8.2f}", style="bold"),
                      "100.0 %", "")
    return Group(Text(title, style="bold"), table)


def compare_table(records: list[dict]) -> Table:
    """Runs side by side, one column per run, with the ratio of the last to the first."""
    table = Table(title="start-up, side by side (seconds)", box=box.SIMPLE_HEAVY,
                  title_justify="left", min_width=60)
    table.add_column("stage")
    for r in records:
        table.add_column(f"{r.get('cache') or '?'}\n{r['id']}", justify="right")
    if len(records) == 2:
        table.add_column("ratio", justify="right")
    for bucket in (*BUCKETS, "time_to_ready", "first_token"):
        if bucket == "time_to_ready":
            vals = [r.get("time_to_ready_s") for r in records]
        elif bucket == "first_token":
            vals = [r.get("first_token_s") for r in records]
        else:
            vals = [(r.get("stages") or {}).get(bucket) for r in records]
        cells = [
            _fmt(v, bucket in set(r.get("not_applicable") or [])) for v, r in zip(vals, records,
                                                                                  strict=True)
        ]
        if len(records) == 2:
            a, b = vals
            cells.append(f"{b / a:5.2f}x" if a and b is not None and a > 0.005 else "")
        style = "bold" if bucket in ("time_to_ready", "first_token") else None
        table.add_row(bucket.replace("_", " ") if bucket not in STAGES else bucket, *cells,
                      style=style)
    return table


def runs_table(records: list[dict]) -> Table:
    table = Table(box=box.SIMPLE, title_justify="left")
    for col in ("id", "started", "status", "cache", "model", "ready s", "1st token s",
                "label / reason"):
        table.add_column(col, justify="right" if col.endswith(" s") else "left",
                         no_wrap=col != "label / reason")
    for r in records:
        ttr, ft = r.get("time_to_ready_s"), r.get("first_token_s")
        table.add_row(
            r["id"], (r.get("started_at") or "")[5:16].replace("T", " "), r.get("status"),
            r.get("cache") or "",
            (r.get("model") or {}).get("name") or "",
            f"{ttr:.2f}" if ttr is not None else "", f"{ft:.2f}" if ft is not None else "",
            r.get("reason") or r.get("label") or "",
        )
    return table


def failed_detail(record: dict) -> Group:
    tail = (record.get("log_tail") or "").splitlines()[-15:]
    return Group(Text(f"run {record['id']} failed: {record.get('reason')}", style="bold red"),
                 Text("\n".join(tail), style="dim"))
