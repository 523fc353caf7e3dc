"""Fault-injection campaigns against real processes (``jepsen-like campaign``)."""

from ._cluster import CLUSTER_ID, Cluster, ClusterSettings, QuorumView, node_event, record_write_id
from ._history import HistoryRecorder
from ._processes import NodeProcess, ProcessGroup
from ._options import CampaignOptions
from ._own_system import OWN_NEMESES, Failed, NodeSpec, OwnCampaignResult, ProcessCluster, ReplicatedCluster, run_own_campaign
from ._runner import Campaign, CampaignResult
from ._scenarios import NEMESIS_SCENARIOS
from ._workloads import WORKLOADS, ClientEndpoints, Workload, WorkloadOptions

__all__ = [
    "CLUSTER_ID",
    "NEMESIS_SCENARIOS",
    "OWN_NEMESES",
    "WORKLOADS",
    "Campaign",
    "CampaignOptions",
    "CampaignResult",
    "ClientEndpoints",
    "Cluster",
    "Failed",
    "OwnCampaignResult",
    "ClusterSettings",
    "HistoryRecorder",
    "NodeSpec",
    "NodeProcess",
    "ProcessCluster",
    "ProcessGroup",
    "QuorumView",
    "ReplicatedCluster",
    "Workload",
    "WorkloadOptions",
    "node_event",
    "record_write_id",
    "run_own_campaign",
]
