"""The suite's scheduler (tests/support/schedule.py), driven through xdist's own scheduler
interface with stand-in workers: a worker is given its next module only when one test or
none is left to it, and while its last test runs, the shortest module left; the long
modules go, longest first, to the workers that are free."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.schedule import LongestFirstScheduling


class Worker:
    """What the scheduler sees of an xdist worker: the tests it was sent, its shutdown."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


# Modules in the suite's order (tests/conftest.py: longest first): a module of one long
# test first, then three long ones, then short unit modules.
COLLECTION = [
    "tests/e2e/test_stack.py::test_one_long",
    *(f"tests/lab/test_{m}.py::test_{i}" for m in ("a", "b", "c") for i in range(3)),
    *(f"tests/unit/test_{m}.py::test_{i}" for m in ("x", "y", "z") for i in range(2)),
]


def _scheduler(workers: list[Worker]) -> LongestFirstScheduling:
    config = SimpleNamespace(getvalue=lambda name: [f"{len(workers)}*popen"], option=SimpleNamespace())
    config.option.loadscopereorder = False
    scheduler = LongestFirstScheduling(config)  # type: ignore[arg-type]
    for w in workers:
        scheduler.add_node(w)  # type: ignore[arg-type]
        scheduler.add_node_collection(w, COLLECTION)  # type: ignore[arg-type]
    scheduler.schedule()
    return scheduler


def _modules(w: Worker) -> list[str]:
    return list(dict.fromkeys(COLLECTION[i].split("::")[0] for i in w.sent))


def test_a_one_test_module_takes_the_shortest_module_with_it_and_the_long_ones_go_to_free_workers() -> None:
    first, second = Worker("gw0"), Worker("gw1")
    scheduler = _scheduler([first, second])
    # The one-test module cannot run until its worker knows a next test: the shortest
    # module left goes with it, not the next long one (xdist's own gives test_a.py).
    assert _modules(first) == ["tests/e2e/test_stack.py", "tests/unit/test_z.py"]
    assert _modules(second) == ["tests/lab/test_a.py"]  # three tests: nothing more yet
    # The second worker's first test done: two left, still nothing more.
    scheduler.mark_test_complete(second, second.sent[0])  # type: ignore[arg-type]
    assert _modules(second) == ["tests/lab/test_a.py"]
    # Its second done: its last one runs once it has a next, the shortest left.
    scheduler.mark_test_complete(second, second.sent[1])  # type: ignore[arg-type]
    assert _modules(second) == ["tests/lab/test_a.py", "tests/unit/test_y.py"]
    # Once the last test left is a companion's, the longest left goes with it.
    scheduler.mark_test_complete(second, second.sent[2])  # type: ignore[arg-type]
    assert _modules(second) == ["tests/lab/test_a.py", "tests/unit/test_y.py"]  # two left
    scheduler.mark_test_complete(second, second.sent[3])  # type: ignore[arg-type]
    assert _modules(second) == ["tests/lab/test_a.py", "tests/unit/test_y.py", "tests/lab/test_b.py"]
    # So does the first once its long test and its companion are done.
    for index in list(first.sent):
        scheduler.mark_test_complete(first, index)  # type: ignore[arg-type]
    assert _modules(first)[2] == "tests/lab/test_c.py"


def test_every_test_is_sent_once_and_every_worker_shut_down_at_the_end() -> None:
    workers = [Worker(f"gw{i}") for i in range(3)]
    scheduler = _scheduler(workers)
    done: set[int] = set()
    while len(done) < len(COLLECTION):
        progressed = False
        for w in workers:
            for index in [i for i in w.sent if i not in done][:1]:
                done.add(index)
                scheduler.mark_test_complete(w, index)  # type: ignore[arg-type]
                progressed = True
        assert progressed, "a worker waits with tests unsent"
    sent = [i for w in workers for i in w.sent]
    assert sorted(sent) == list(range(len(COLLECTION)))
    assert all(w.shutting_down for w in workers) and scheduler.tests_finished
