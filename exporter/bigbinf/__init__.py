"""bigbinf: scheduled, packet-captured bulk-transfer measurements published to Prometheus."""

__version__ = "0.1.0"
