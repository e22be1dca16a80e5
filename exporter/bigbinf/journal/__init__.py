"""The journal: what was measured, kept on disk, and what a start restores from it.

* store.py: the results and path baselines appended (fsynced) one JSON line each, rotated
  into sealed day segments, and read back (`Journal`, `BaselineJournal`, `read`);
* checkpoint.py: what a start restores, folded from the journal and kept beside it;
* pending.py: the captures kept for later analysis (an analysis that timed out or was
  cut by a stop), with the results they belong to.

Below the judgements from history (history/) that read it: nothing here imports them.
"""
