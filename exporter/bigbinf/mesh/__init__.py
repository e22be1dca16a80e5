"""Many sites: the mesh file (config.py), its slot plan (plan.py), the Prometheus files
generated from it (prometheus.py) and the `mesh` commands (cli.py); docs/mesh.md."""


class UsageError(Exception):
    """A `mesh` command's flag missing or wrong: said with the fix, exit 2 (no traceback)."""
