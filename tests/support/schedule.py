"""How the suite's modules go to xdist's workers (scripts/test.sh: `-n N --dist loadfile`):
longest first, as tests/conftest.py orders them, and a worker's next module taken only
once it needs one.

xdist's own loadfile scheduler hands a worker its next module as soon as two tests or
fewer are left in the ones it holds: a module of one or two long tests (the compose
stack's, a mesh's) takes the next longest module with it at the start, which then waits
behind it while other workers idle, and the suite's end is that module's.  A worker needs
its next test only to run its last one (it runs a test once it knows the one after: the
fixtures' teardown depends on it), so here a worker is given more when one test or none
is left; and while that one test (of a module it took longest first) still runs, what it
is given is the *shortest* module left (the queue's tail: a unit module of a second or
two), so that the long ones still go, longest first, to the workers that are free.  The
last test of such a companion takes the longest module left with it.
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController


class LongestFirstScheduling(LoadFileScheduling):
    def __init__(self, config: object, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self.companions: set[str] = set()  # modules given as the shortest left

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        held = self.assigned_work[node]
        left = [scope for scope, tests in held.items() if not all(tests.values())]
        if self._pending_of(held) > 1:
            return
        # One test left, of a module taken longest first: it may run long, the shortest
        # goes with it.  Of a companion, or none left: the longest.
        self._assign(node, shortest=bool(left) and left[0] not in self.companions)

    def _assign(self, node: WorkerController, shortest: bool) -> None:
        scope, work_unit = self.workqueue.popitem(last=shortest)
        if shortest:
            self.companions.add(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in work_unit.items() if not done])
