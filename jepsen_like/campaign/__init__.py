"""Fault-injection campaigns against real processes (``jepsen-like campaign``)."""

from ._history import HistoryRecorder
from ._processes import NodeProcess, ProcessGroup
from ._runner import NEMESIS_SCENARIOS, Campaign, CampaignOptions, CampaignResult
from ._workloads import RegisterWorkload, RegisterWorkloadOptions

__all__ = [
    "NEMESIS_SCENARIOS",
    "Campaign",
    "CampaignOptions",
    "CampaignResult",
    "HistoryRecorder",
    "NodeProcess",
    "ProcessGroup",
    "RegisterWorkload",
    "RegisterWorkloadOptions",
]
