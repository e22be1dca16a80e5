"""bigbinf: scheduled, packet-captured bulk-transfer measurements published to Prometheus."""

__version__ = "0.1.0"
# Where the project's documentation is read on the web: the base of the alerts' runbook_url
# (python -m bigbinf.mixin.rules --runbook) and the landing page's link.
DOCS_URL = "https://github.com/bigbinf/bigbinf/blob/main/docs"
