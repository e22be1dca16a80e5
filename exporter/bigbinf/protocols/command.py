"""Any user-configured command: the argv template from the config, run with a timeout.

Every other command-line protocol reuses this runner with its own default templates.
"""

from __future__ import annotations

from typing import Any

from bigbinf.process import in_netns, run_with_timeout
from bigbinf.protocols.base import NoOptions, Profile, RunContext, RunOutcome


def run(ctx: RunContext[Any]) -> RunOutcome:
    done = run_with_timeout(in_netns(ctx.netns, ctx.argv), ctx.timeout_seconds, env=ctx.env, cwd=str(ctx.workdir))
    return RunOutcome(**vars(done))


PROFILE = Profile(
    name="command",
    description="any transfer command given as an argv template in the config",
    binary="",
    commands=lambda options: {},
    runner=run,
    options_type=NoOptions,
)
