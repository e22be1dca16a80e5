"""The judgements from history: what the journaled runs of a series or a remote say.

* regression.py: the live regression test per series; regression_state.py: its states
  (opened, recovered, dismissed, accepted) beside the journal; change.py: what changed
  when a regression began; regression_cmd.py: `regression list|accept`;
* moveplan.py: the model of a move's duration; planmove.py: the `plan-move` command;
* advice.py: the `advise` command (buffers against the BDP, from the journals).

Which runs they stand on is bigbinf.runs, below both these and the journal's checkpoint.
"""
