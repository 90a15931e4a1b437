"""The pages every evaluation run publishes in its reports folder, under ``runs/<run id>/`` and
``latest/``: named once, for the code that writes them, the report that links its neighbour by a
relative link, and the Slack messages that link them under the served reports folder."""

REPORT_PAGE = "slice_report.html"  # the HTML report
CASE_EXPLORER_PAGE = "case_explorer.html"  # every case of the run and its flip against the baseline run
CASES_DOCUMENT = "cases.json"  # the case explorer's data, the same bytes its page embeds
