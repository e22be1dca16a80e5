"""The local lab that stands in for a remote site (`bigbinf-exporter lab up|down|status|serve`).

layout.py names everything a lab uses; network.py builds its namespaces, link and delay
line (delayline.py); servers.py runs one server per protocol; control.py puts them
together; mesh.py builds N such sites on one bridge (`lab up --mesh.file`).  The live
path (measure/, service/) never imports this package: cli.py hands it `site(config)`, the
lab as a remote (measure.plan.LabSite).
"""

from bigbinf.lab.control import down, lab_datasets, lab_servers, serve, site, status, teardown, up
from bigbinf.lab.layout import LabError, LabLayout

__all__ = ["LabError", "LabLayout", "down", "lab_datasets", "lab_servers", "serve", "site", "status", "teardown", "up"]
