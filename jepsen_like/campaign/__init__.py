"""Fault-injection campaigns against real processes (``jepsen-like campaign``)."""

from ._cluster import CLUSTER_ID, Cluster, ClusterSettings, QuorumView, node_event, record_write_id
from ._history import HistoryRecorder
from ._processes import NodeProcess, ProcessGroup
from ._options import CampaignOptions
from ._runner import Campaign, CampaignResult
from ._scenarios import NEMESIS_SCENARIOS
from ._workloads import WORKLOADS, ClientEndpoints, Workload, WorkloadOptions

__all__ = [
    "CLUSTER_ID",
    "NEMESIS_SCENARIOS",
    "WORKLOADS",
    "Campaign",
    "CampaignOptions",
    "CampaignResult",
    "ClientEndpoints",
    "Cluster",
    "ClusterSettings",
    "HistoryRecorder",
    "NodeProcess",
    "ProcessGroup",
    "QuorumView",
    "Workload",
    "WorkloadOptions",
    "node_event",
    "record_write_id",
]
