"""The docs list what the code has: every metric and every config key."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from bigbinf import config as C
from bigbinf import metrics as M
from bigbinf.protocols.base import PLACEHOLDERS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_metrics_reference_lists_every_metric() -> None:
    text = (DOCS / "metrics.md").read_text()
    missing = [spec.name for spec in M.ALL_WITH_MESH if f"| `{spec.name}` | {spec.type} |" not in text]
    assert missing == []


def test_configuration_reference_lists_every_key_and_placeholder() -> None:
    text = (DOCS / "configuration.md").read_text()
    models: list[type[BaseModel]] = [
        C.RemoteConfig,
        C.ProbeConfig,
        C.DatasetConfig,
        C.ProtocolConfig,
        C.ScheduleConfig,
        C.TransferSelector,
        C.TransferConfig,
        C.CaptureConfig,
        C.JournalConfig,
        C.MetricsConfig,
        C.LabConfig,
        C.LinkConfig,
        C.SweepConfig,
        C.PassiveConfig,
        C.PassiveRemoteConfig,
    ]
    missing = [f"{m.__name__}.{name}" for m in models for name in m.model_fields if f"| `{name}` |" not in text]
    assert missing == []
    assert [p for p in PLACEHOLDERS if f"| `{{{p}}}` |" not in text] == []
