"""The causes of the plain-site matrix (issue 34, item 5), one list per room: the remote
host (plain_causes_remote.py), the path (plain_causes_path.py), this host
(plain_causes_host.py).  Every cause is induced the way a real site produces it."""

from __future__ import annotations

from .plain_causes_host import CAUSES as HOST
from .plain_causes_path import CAUSES as PATH
from .plain_causes_remote import CAUSES as REMOTE
from .plain_site import PlainCause, check_causes

CAUSES: list[PlainCause] = [*REMOTE, *PATH, *HOST]
check_causes(CAUSES)
