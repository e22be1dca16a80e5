"""The passive watcher: this host's own TCP connections to configured remotes and services,
read from the kernel with `ss` while they live and as they close, each transfer judged by
the same judge as a scheduled one (docs/passive.md).

- `select.py`: which connections (the remotes' networks, the services' ports) and the ss
  filter that makes the kernel choose them;
- `flows.py`: the connections followed (their listings, bounded), grouped into transfers,
  and a transfer's Result (source "passive"), judged;
- `watcher.py`: the running part: the listings, the close events, the bound on its cost.
"""
