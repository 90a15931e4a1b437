"""Data contracts (pydantic v2) and the loaders that turn every dialect into canonical columns."""

from ragspine_pipeline.contracts.columns import GOLD_SCHEMA, TRACE_SCHEMA, Loaded, load_gold, load_traces
from ragspine_pipeline.contracts.gold import GoldCase
from ragspine_pipeline.contracts.trace import Trace

__all__ = ["GOLD_SCHEMA", "TRACE_SCHEMA", "GoldCase", "Loaded", "Trace", "load_gold", "load_traces"]
