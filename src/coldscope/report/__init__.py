"""``coldscope report``: the paper's figures for the user's own runs, as one offline HTML page.

``data`` turns run records (or the paper's published data) into chart data, pure functions;
``html`` renders that data as inline SVG and tables with the package's CSS/JS inlined. (The
headless-Chromium driver the tests and the benchmark use lives in ``tests/browser.py``.)
"""

from coldscope.report.data import build_report_data, paper_records
from coldscope.report.html import render_report

__all__ = ["build_report_data", "paper_records", "render_report"]
