"""Any user-configured command: the argv template from the config, run with a timeout.

Every other command-line protocol reuses this runner with its own default templates.
"""

from __future__ import annotations

from ..process import in_netns, run_with_timeout
from .base import Profile, RunContext, RunOutcome


def run(ctx: RunContext) -> RunOutcome:
    returncode, timed_out, duration, start, stderr = run_with_timeout(
        in_netns(ctx.netns, ctx.argv), ctx.timeout_seconds, env=ctx.env, cwd=str(ctx.workdir))
    return RunOutcome(returncode, timed_out, duration, start, stderr)


PROFILE = Profile(
    name="command",
    description="any transfer command given as an argv template in the config",
    commands={},
    runner=run,
)
