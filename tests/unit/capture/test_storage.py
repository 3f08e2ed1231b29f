"""Storage evidence (coldscope.capture.storage, the probe's io_read, weights_from_disk): the page
cache's share of a file as the kernel reports it after eviction and after a read, the bytes a
probed call read from storage against the size of the file it read, and the finding from
those measurements. Expected values are the sizes of the files the tests write."""

import os
import subprocess
import sys

import pytest

from coldscope.analysis.findings import RunFacts, rule_weights_from_disk
from coldscope.capture.probe import (
    PROBE_DIR,
    processes_from_events,
    read_probe_events,
    storage_reads,
)
from coldscope.capture.storage import residency, resident_bytes, weight_files
from coldscope.core.records import Storage

MIB = 1024 * 1024


def _evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _write(path, size):
    path.write_bytes(os.urandom(size))
    return path


def test_residency_as_the_kernel_reports_it(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    a = _write(model / "model-00001.safetensors", 4 * MIB)
    b = _write(model / "model-00002.safetensors", 2 * MIB + 100)
    _write(model / "tokenizer.json", 1000)             # not a weight file
    assert weight_files(model) == [a, b]
    for f in (a, b):
        _evict(f)
    assert resident_bytes(a) < MIB                    # evicted (a few pages may come back)
    a.read_bytes()
    assert resident_bytes(a) == 4 * MIB               # read whole: every page held
    held = residency(model)
    assert (held.files, held.bytes) == (2, 6 * MIB + 100)
    assert 4 * MIB <= held.resident_bytes < 5 * MIB   # a held, b evicted
    assert held.share == pytest.approx(held.resident_bytes / (6 * MIB + 100))
    assert residency(tmp_path / "nothing") is None and residency(None) is None


ENGINE = '''
import sys, fakeloader
fakeloader.load(sys.argv[1])   # the weights evicted: read from storage
fakeloader.load(sys.argv[1])   # again: from the page cache
'''

LOADER = '''
def load(path):
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass
'''


def test_the_probe_measures_what_a_hooked_call_read_from_storage(tmp_path):
    weights = _write(tmp_path / "w.safetensors", 8 * MIB)
    _evict(weights)
    (tmp_path / "fakeloader.py").write_text(LOADER)
    (tmp_path / "engine.py").write_text(ENGINE)
    out = tmp_path / "probe"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PROBE_DIR), str(tmp_path)]),
               COLDSCOPE_PROBE_DIR=str(out),
               COLDSCOPE_PROBE_HOOKS="fakeloader:load=model_loading/weights")
    done = subprocess.run([sys.executable, str(tmp_path / "engine.py"), str(weights)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (proc,) = [p for p in processes_from_events(read_probe_events(out))
               if p.intervals("model_loading/weights")]
    # the probe times outermost calls only: each load() is one call here
    first, second = storage_reads([proc], "model_loading/weights")
    assert 8 * MIB <= first.bytes <= 9 * MIB           # the file, plus at most readahead
    assert second.bytes < MIB                          # the page cache served it
    assert first.seconds > 0 and first.pid == proc.pid


def test_storage_reads_pair_begin_and_end_by_hand():
    events = [
        {"ev": "process", "name": "process", "mono": 0.0, "pid": 7},
        {"ev": "begin", "name": "model_loading/weights", "mono": 1.0, "pid": 7, "io_read": 100},
        {"ev": "end", "name": "model_loading/weights", "mono": 3.5, "pid": 7, "io_read": 5100},
        {"ev": "begin", "name": "model_loading/weights", "mono": 4.0, "pid": 7, "io_read": None},
        {"ev": "end", "name": "model_loading/weights", "mono": 4.5, "pid": 7, "io_read": 6000},
    ]
    (read,) = storage_reads(processes_from_events(events), "model_loading/weights")
    assert (read.bytes, read.seconds, read.pid) == (5000, 2.5, 7)


def _facts(**storage):
    return RunFacts(substeps={"model_loading/weights": 3.96}, storage=Storage(**storage))


def test_weights_from_disk_fires_from_the_measured_reads():
    (f,) = rule_weights_from_disk(_facts(weights_bytes=1_230_000_000,
                                         weights_read_bytes=1_230_000_000,
                                         resident_at_launch=0.0, read_bandwidth_bps=3.1e8))
    assert f.seconds_at_stake == 3.96
    assert f.evidence == ("during model_loading/weights the engine read 1.230 GB from storage, "
                          "100% of the 1.230 GB of weight files (0% of them were in the page "
                          "cache at launch), at 0.31 GB/s; model_loading/weights took 3.96 s")
    # the page cache held them: nothing to find, whatever else is known
    assert rule_weights_from_disk(_facts(weights_bytes=1_230_000_000, weights_read_bytes=4096,
                                         resident_at_launch=1.0)) == []
    # nothing measured: only an eviction coldscope did itself says so (as before)
    assert rule_weights_from_disk(_facts()) == []
    (f,) = rule_weights_from_disk(RunFacts(substeps={"model_loading/weights": 2.0},
                                           page_cache="cold"))
    assert f.evidence.startswith("the weights were evicted from the page cache")
