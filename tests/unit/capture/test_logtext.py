"""Engine-neutral line cleaning (``coldscope.capture.logtext``): each wrapper a fleet's logs
carry is removed, and the engine's own text is left exactly as it was written."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coldscope.capture.logtext import normalise, strip_outer_prefix, without_repeats

ENGINE = [
    "(APIServer pid=1) INFO 06-07 13:19:24 [utils.py:299] non-default args: {'model': 'm'}",
    "(EngineCore pid=96) INFO 06-07 13:27:19 [default_loader.py:384] Loading weights took "
    "371.35 seconds",
    "(APIServer pid=1) INFO:     Application startup complete.",
]


def test_clean_lines_pass_through_unchanged():
    out = normalise(ENGINE)
    assert out.lines == tuple(ENGINE)
    assert out.source == (0, 1, 2)
    assert out.notes() == []


def test_ansi_colours_are_removed():
    coloured = ["\x1b[0;36m(APIServer pid=1)\x1b[0;0m INFO 06-07 13:19:24 [utils.py:299] x"]
    assert normalise(coloured).lines == ("(APIServer pid=1) INFO 06-07 13:19:24 [utils.py:299] x",)


def test_collector_timestamp_prefixes_are_removed():
    line = ENGINE[1]
    wrapped = [
        "2026-06-07T13:27:19.123456789Z " + line,                  # docker/kubectl --timestamps
        "2026-06-07T13:27:19.123456789+00:00 stdout F " + line,    # CRI log file
        "2026-06-07T13:27:19+0000 node7 vllm[4242]: " + line,      # journalctl -o short-iso
        "Jun 07 13:27:19 node7 vllm[4242]: " + line,               # journalctl (short)
        "2026-06-07 13:27:19.123Z " + line,                        # a collector's ISO stamp
    ]
    for w in wrapped:
        assert strip_outer_prefix(w) == (line, True), w
    out = normalise(wrapped, drop_repeats=False)
    assert set(out.lines) == {line}
    assert out.prefixed == 5


def test_cri_partial_pieces_are_joined():
    line = ENGINE[1]
    pieces = ["2026-06-07T13:27:19.1Z stdout P " + line[:30],
              "2026-06-07T13:27:19.1Z stdout P " + line[30:60],
              "2026-06-07T13:27:19.1Z stdout F " + line[60:], ENGINE[2]]
    out = normalise(pieces)
    assert out.lines == (line, ENGINE[2]) and out.source == (2, 3)


def test_python_logging_text_with_its_own_stamp_is_kept():
    text = "2026-08-02 10:30:12,584 - INFO - autotuner.py:651 - flashinfer.jit: starts"
    assert strip_outer_prefix(text) == (text, False)


def test_tail_separators_are_dropped():
    out = normalise(["==> /var/log/a.log <==", ENGINE[0], "", "==> b.log <==", ENGINE[2]])
    assert out.lines == (ENGINE[0], "", ENGINE[2])
    assert out.source == (1, 2, 4)
    assert out.dropped["separator"] == 2


def test_carriage_return_redraws_become_lines():
    bar = "(EngineCore pid=1) \rCapturing: 0%| 0/2\rCapturing: 50%| 1/2\rCapturing: 100%| 2/2"
    out = normalise([bar, "banner line\r"])
    assert out.lines == ("(EngineCore pid=1)", "Capturing: 0%| 0/2", "Capturing: 50%| 1/2",
                         "Capturing: 100%| 2/2", "banner line")
    assert out.source == (0, 0, 0, 0, 1)


def test_repeated_lines_with_a_time_count_once_and_untimed_ones_stay():
    bar = "Loading safetensors checkpoint shards: 100% Completed | 4/4"
    out = normalise([ENGINE[0], ENGINE[1], ENGINE[1], bar, bar, ENGINE[0]])
    assert out.lines == (ENGINE[0], ENGINE[1], bar, bar)
    assert out.dropped["repeat"] == 2
    kept = normalise([ENGINE[1], ENGINE[1]], drop_repeats=False)
    assert len(kept.lines) == 2 and len(without_repeats(kept).lines) == 1


def test_a_whole_text_and_bytes_are_split_into_lines():
    text = "\n".join(ENGINE)
    assert normalise(text).lines == tuple(ENGINE)
    assert normalise(text.encode()).lines == tuple(ENGINE)
    assert normalise([ENGINE[0].encode()]).lines == (ENGINE[0],)


@given(st.lists(st.one_of(st.text(), st.binary(max_size=200)), max_size=30))
def test_never_raises_and_keeps_sources_in_order(lines):
    out = normalise(lines)
    assert len(out.lines) == len(out.source)
    assert list(out.source) == sorted(out.source)
    assert all("\x1b" not in t and "\r" not in t for t in out.lines)


@given(st.lists(st.sampled_from(ENGINE), max_size=12),
       st.sampled_from(["", "2026-06-07T13:27:19.5Z ", "Jun 07 13:27:19 h u[1]: "]),
       st.booleans())
def test_wrapping_never_changes_the_engine_text(lines, prefix, colour):
    def wrap(t: str) -> str:
        if colour:
            t = t.replace("(", "\x1b[0;36m(").replace(")", ")\x1b[0;0m", 1)
        return prefix + t
    assert normalise([wrap(t) for t in lines]).lines == normalise(lines).lines
