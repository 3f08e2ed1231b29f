"""A probe for tests/unit/test_ci_skips.py (not collected by itself: its name is no test
file's): a module that skips as it is collected when the probe's variable is set."""

import os

import pytest

if os.environ.get("COLDSCOPE_SKIP_PROBE") == "1":
    pytest.importorskip("coldscope_probe_collect_no_such_module")


def test_probe_collected():
    pass
