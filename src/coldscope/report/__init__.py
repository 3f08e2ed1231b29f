"""``coldscope report``: the paper's figures for the user's own runs, as one offline HTML page.

``build`` chooses the runs and builds every section of the page (``sections``: one module per
section, each a ``build`` returning a typed record and a ``draw`` turning it into HTML) into a
``Report``; ``html`` lays the drawn sections out on one page with the package's CSS/JS inlined;
``svg`` holds what every chart is drawn with. (The headless-Chromium driver the tests and the
benchmark use lives in ``tests/browser.py``.)
"""

from coldscope.report.build import build_report, make_report
from coldscope.report.contents import Report
from coldscope.report.html import render_report
from coldscope.report.paper import paper_records

__all__ = ["Report", "build_report", "make_report", "paper_records", "render_report"]
