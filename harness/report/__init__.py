"""Run reports (issue #5): from one or several run folders, a self-contained ``report.html``, a
``report.md`` with the same tables, the checkers' row tables as CSV, and the figures (ownership timeline,
recovery CDF, recovery phases, persisted sequences).

``build_report(run_dirs, out, progress)`` is the entry point; ``python -m harness.report`` its command line.
Modules: ``model`` (a run read and analysed), ``summary`` (headline and tables), ``figures`` (matplotlib),
``render`` (HTML and Markdown), ``load`` (the Locust section: Locust's CSVs and the history's ``load.*``
events), ``build`` (putting it together).
"""

from harness.report.build import build_report
from harness.report.model import ReportError

__all__ = ["ReportError", "build_report"]
