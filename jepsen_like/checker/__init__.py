"""The history checker: Spark (tier 1 SQL checks, tier 2 per-key
linearizability) and a pure-Python reference checker for little histories.

It imports nothing of the system it checks: it reads histories, node event
logs and log dumps in the formats docs/checker.md describes, so histories
from other systems in the same format can be checked too.

The Spark job (``check``, ``check_sources``) and the synthesizer
(``synthesize``, ``SynthesisResult``, ``ANOMALY_KINDS``) are imported on
first use: importing the package needs neither pyspark nor numpy/pandas, so
the reference checks run where those do not exist (the browser playground,
under Pyodide).
"""

from importlib import import_module
from typing import Any

from jepsen_like.checker._errors import HistoryFormatError
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
from jepsen_like.checker._reference import check_reference, check_source_reference, search_history, stale_reads_of_events
from jepsen_like.checker._report import (
    CHECK_NAMES,
    HistoryResult,
    exit_code,
    print_summary,
    write_results,
)
from jepsen_like.checker._spark import DEFAULT_MASTER, spark_session
from jepsen_like.checker._step_model import model_from_step
from jepsen_like.checker._wgl import (
    DEFAULT_BUDGET_MS,
    DEFAULT_BUDGET_STATES,
    DEFAULT_BUDGET_STEPS,
    KeyBudget,
    KeyVerdict,
    check_operations,
)

# Public names whose modules import pyspark (``_job``) or numpy and pandas
# (``_synth``): loaded by ``__getattr__`` when first asked for.
_LAZY = {
    "check": "jepsen_like.checker._job",
    "check_sources": "jepsen_like.checker._job",
    "ANOMALY_KINDS": "jepsen_like.checker._synth",
    "SynthesisResult": "jepsen_like.checker._synth",
    "synthesize": "jepsen_like.checker._synth",
}


def __getattr__(name: str) -> Any:
    """The lazily imported public names (PEP 562); raises AttributeError
    for any other name, and ImportError when pyspark (or numpy/pandas) is
    missing."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ANOMALY_KINDS",
    "CAS_REGISTER",
    "CHECK_NAMES",
    "COUNTER",
    "DEFAULT_BUDGET_MS",
    "DEFAULT_BUDGET_STATES",
    "DEFAULT_BUDGET_STEPS",
    "DEFAULT_MASTER",
    "HistoryFormatError",
    "HistoryMeta",
    "HistoryResult",
    "HistorySource",
    "KV",
    "KeyBudget",
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
    "model_from_step",
    "print_summary",
    "read_meta",
    "search_history",
    "spark_session",
    "stale_reads_of_events",
    "synthesize",
    "write_results",
]
