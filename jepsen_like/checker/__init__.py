"""The history checker: Spark (tier 1 SQL checks, tier 2 per-key
linearizability) and a pure-Python reference checker for little histories.

It imports nothing of the system it checks: it reads histories, node event
logs and log dumps in the formats docs/checker.md describes, so histories
from other systems in the same format can be checked too.
"""

from jepsen_like.checker._errors import HistoryFormatError
from jepsen_like.checker._job import check, check_sources
from jepsen_like.checker._load import HistoryMeta, HistorySource, discover_histories, read_meta
from jepsen_like.checker._model_catalog import (
    CAS_REGISTER,
    COUNTER,
    MODEL_DEFAULT,
    MODELS,
    MULTI_REGISTER,
    MUTEX,
    SET,
    get_model,
)
from jepsen_like.checker._models import KV, METADATA, REGISTER, Model, Operation
from jepsen_like.checker._reference import check_reference, check_source_reference
from jepsen_like.checker._report import (
    CHECK_NAMES,
    HistoryResult,
    exit_code,
    print_summary,
    write_results,
)
from jepsen_like.checker._synth import ANOMALY_KINDS, SynthesisResult, synthesize
from jepsen_like.checker._spark import DEFAULT_MASTER, spark_session
from jepsen_like.checker._wgl import DEFAULT_BUDGET_STEPS, KeyVerdict, check_operations


__all__ = [
    "ANOMALY_KINDS",
    "CAS_REGISTER",
    "CHECK_NAMES",
    "COUNTER",
    "DEFAULT_BUDGET_STEPS",
    "DEFAULT_MASTER",
    "HistoryFormatError",
    "HistoryMeta",
    "HistoryResult",
    "HistorySource",
    "KV",
    "KeyVerdict",
    "METADATA",
    "MODELS",
    "MODEL_DEFAULT",
    "MULTI_REGISTER",
    "MUTEX",
    "Model",
    "Operation",
    "REGISTER",
    "SET",
    "SynthesisResult",
    "check",
    "check_operations",
    "check_reference",
    "check_sources",
    "check_source_reference",
    "discover_histories",
    "exit_code",
    "get_model",
    "print_summary",
    "read_meta",
    "spark_session",
    "synthesize",
    "write_results",
]
