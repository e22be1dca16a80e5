"""The verdict on a plain remote (issue 34, item 5): the path's causes of
tests/support/plain_causes_path.py, each three runs through the real path
(tests/support/plain_site.py)."""

import pytest

from ..support import plain_site
from ..support.plain_causes_path import CAUSES

pytestmark = pytest.mark.lab

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(CAUSES)
