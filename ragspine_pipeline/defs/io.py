"""How values travel between steps: tables as Parquet, typed records as JSON, everything else pickled,
in an object folder.

Asset values are data a notebook can read without this project: tables are pandas DataFrames with
pyarrow-backed dtypes (``metric_table``, the slice table, ``production_metrics``, the daily sample);
typed records are pydantic models (the ``release_decision``, a
:class:`~ragspine_pipeline.decision.release.ReleaseDecision`). :class:`ObjectStoreIOManager` stores a
DataFrame as Parquet (``<asset key>[/<partition>].parquet``), a model as its JSON (``….json``: read
back as the model the reading step's input is annotated with, or as plain data), and anything else as
a pickle (``….pickle``) in an :class:`~ragspine_pipeline.sources.objects.ObjectFolder`: the instance's
storage directory by default, ``RAGSPINE_IO_URI`` (``s3://bucket/prefix``) when steps run on several
hosts — so a step never reads another step's local disk. Op outputs inside a graph (the sampling
shards) go under ``<run id>/<step>/<output>``.

Writes are whole or absent (a local file is renamed into place, an S3 object appears when its upload
completes): two runs of the whole graph at once never read each other's half-written values. Each
table records ``dagster/column_schema``, ``dagster/row_count`` and its ``path``.

A DataFrame's ``attrs`` (small JSON-able facts that travel with a table, e.g. the golden set's lock)
are kept in the Parquet schema metadata. The scoring core stays on Arrow: :func:`to_frame` and
:func:`to_table` convert at this boundary, losslessly (nested lists, structs and maps included).
"""

from __future__ import annotations

import functools
import json
import os
import pickle
from collections.abc import Mapping
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from ragspine_pipeline.sources.objects import ObjectFolder

ATTRS_KEY = b"ragspine.attrs"
IO_MANAGER_KEY = "ragspine_io_manager"
"""The resource key every asset and op output of a service is stored under: a name of its own, so that a
project's own ``io_manager`` (or Dagster's default) neither replaces it nor clashes with it."""


def to_frame(table: pa.Table, **attrs: Any) -> pd.DataFrame:
    """``table`` as a DataFrame with pyarrow-backed dtypes (no copy of the buffers), ``attrs`` attached."""
    frame = table.to_pandas(types_mapper=pd.ArrowDtype)
    frame.attrs.update(attrs)
    return frame


def to_table(frame: pd.DataFrame, schema: pa.Schema | None = None) -> pa.Table:
    """A DataFrame of :func:`to_frame` (or any DataFrame) back as an Arrow table, cast to ``schema``."""
    table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    return table if schema is None else table.cast(schema)


class _ObjectStoreIO(dg.IOManager):
    def __init__(self, folder: ObjectFolder) -> None:
        self.folder = folder

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        name = _name(context)
        if isinstance(obj, pd.DataFrame):
            # Only the attrs travel in the schema metadata: pandas' own entry would name the ArrowDtypes
            # of nested columns in a form pandas.read_parquet cannot parse back.
            table = to_table(obj).replace_schema_metadata({ATTRS_KEY: json.dumps(obj.attrs).encode()})
            with self.folder.open_output(f"{name}.parquet", "asset value") as out:
                pq.write_table(table, out, compression="zstd")
            context.add_output_metadata(
                {
                    "dagster/column_schema": dg.MetadataValue.table_schema(_column_schema(table.schema)),
                    "dagster/row_count": dg.MetadataValue.int(table.num_rows),
                    "path": dg.MetadataValue.path(self.folder.join(f"{name}.parquet")),
                }
            )
            return
        if isinstance(obj, BaseModel):
            body = obj.model_dump_json(by_alias=True, indent=1).encode("utf-8")
            path = self.folder.write_bytes(f"{name}.json", body, "asset value")
            context.add_output_metadata({"path": dg.MetadataValue.path(path)})
            return
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        path = self.folder.write_bytes(f"{name}.pickle", data, "step output")
        context.add_output_metadata({"path": dg.MetadataValue.path(path)})

    def load_input(self, context: dg.InputContext) -> Any:
        name = _name(context)
        if self.folder.exists(f"{name}.parquet"):
            with self.folder.open_input_file(f"{name}.parquet", "asset value") as source:
                table = pq.read_table(source)
            attrs = (table.schema.metadata or {}).get(ATTRS_KEY)
            frame = to_frame(table.replace_schema_metadata(None))
            frame.attrs.update(json.loads(attrs) if attrs else {})
            return frame
        if self.folder.exists(f"{name}.json"):
            data = self.folder.read_json(f"{name}.json", "asset value")
            model = _model_type(context)
            return model.model_validate(data) if model is not None else data
        # A value of unbounded size (a pickled shard result) is read whole, not through the JSON caps.
        value = pickle.loads(self.folder.read_bytes(f"{name}.pickle", "step output", limit=1 << 40))
        # A decision an earlier version pickled as a dict, read by a re-execution after an upgrade.
        model = _model_type(context) if isinstance(value, dict) else None
        return model.model_validate(value) if model is not None else value


def _name(context: dg.InputContext | dg.OutputContext) -> str:
    """``<asset key>[/<partition>]`` for an asset, ``<run>/<step>/<output>[/<mapping key>]`` for an op."""
    if context.has_asset_key:
        parts = context.get_asset_identifier()
    else:
        source = context.upstream_output if isinstance(context, dg.InputContext) else context
        parts = source.get_identifier()
    return "/".join(parts)


def _model_type(context: dg.InputContext) -> type[BaseModel] | None:
    """The pydantic model the reading step's input is annotated with (an asset value loader's
    ``python_type``), else None: the plain JSON data, what a notebook without this package reads."""
    wanted = getattr(context.dagster_type, "typing_type", None)
    return wanted if isinstance(wanted, type) and issubclass(wanted, BaseModel) else None


def _column_schema(schema: pa.Schema) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(field.name, str(field.type)) for field in schema])


class ObjectStoreIOManager(dg.ConfigurableIOManagerFactory):
    """Asset values and step outputs in an object folder: tables as Parquet, everything else pickled;
    under `base_uri` (a folder or `s3://` prefix), else the instance's storage directory."""

    base_uri: str | None = None
    endpoint_url: str | None = None
    region: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> _ObjectStoreIO:
        base = self.base_uri or context.instance.storage_directory()
        return _ObjectStoreIO(ObjectFolder(base, endpoint_url=self.endpoint_url, region=self.region))


def io_manager_from_env(env: Mapping[str, str] = os.environ) -> ObjectStoreIOManager:
    """Where values between steps live: ``RAGSPINE_IO_URI`` (``s3://bucket/prefix`` when steps run on
    several hosts; ``RAGSPINE_S3_ENDPOINT_URL`` for an S3-compatible store), else the instance's
    storage directory. One object per setting: every service of a code location hands Dagster the same
    one (definitions that name one resource key merge only when it is the same object)."""
    return _io_manager(env.get("RAGSPINE_IO_URI") or None, env.get("RAGSPINE_S3_ENDPOINT_URL") or None)


@functools.cache
def _io_manager(base_uri: str | None, endpoint_url: str | None) -> ObjectStoreIOManager:
    return ObjectStoreIOManager(base_uri=base_uri, endpoint_url=endpoint_url)
