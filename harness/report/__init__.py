"""Run reports (issue #5): from one or several run folders, a self-contained ``report.html``, a
``report.md`` with the same tables, the checkers' row tables as CSV, and the figures (ownership timeline,
recovery CDF, recovery phases, persisted sequences).

``build_report(run_dirs, out, progress)`` is the entry point; ``python -m harness.report`` its command line.
Modules: ``model`` (a run read and analysed), ``text`` (words for numbers and verdicts), ``bounds`` (a run's
bounds as computed), ``headline`` (one run's summary and checker table), ``tables`` (one run's row tables),
``compare`` (several runs side by side), ``coverage`` (the Coverage table), ``figures`` (matplotlib),
``render`` (HTML and Markdown), ``load`` (the Locust section: Locust's CSVs and the history's ``load.*``
events), ``build`` (putting it together).
"""

from harness.report.build import build_report
from harness.report.model import ReportError

__all__ = ["ReportError", "build_report"]
