"""Why was it slow: the judgement of one transfer, apart from measure/ (which measures).

`judge_limit(result, baseline)` gives the verdict (inputs.py assembles what the rules
read, rules.py applies them in physics' order, vetoes.py withholds what the physics does
not allow, steps.py says what to do); `leaves_out_of_baselines(result)` says whether a
run belongs in its series' baselines (the regression test, plan-move)."""

from bigbinf.judge.verdict import judge_limit, leaves_out_of_baselines

__all__ = ["judge_limit", "leaves_out_of_baselines"]
