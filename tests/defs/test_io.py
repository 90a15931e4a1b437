"""Values between steps: DataFrames as Parquet, models as JSON and dicts as pickles, in a local folder
or on S3 (a moto server on loopback), loadable by a notebook through the asset value loader."""

import errno
import json
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa
import pytest
from pydantic import BaseModel

from ragspine_pipeline.contracts.schemas import TRACE_SCHEMA
from ragspine_pipeline.defs.io import ObjectStoreIOManager, to_frame, to_table
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.objects import ObjectFolder, s3_filesystem

NESTED = pa.table(
    {
        "qid": ["a", "b", None],
        "ids": [["x", "y"], [], None],
        "tags": pa.array([[("topic", "FIN")], [], None], pa.map_(pa.string(), pa.string())),
        "claims": pa.array(
            [[{"text": "t", "support": ["p"]}], None, []],
            pa.list_(pa.struct([("text", pa.string()), ("support", pa.list_(pa.string()))])),
        ),
        "score": [0.5, None, 1.0],
    }
)


def test_an_arrow_table_survives_the_dataframe_boundary_exactly():
    frame = to_frame(NESTED, lock={"version": "v1"})
    assert all(isinstance(dtype, pd.ArrowDtype) for dtype in frame.dtypes)
    assert to_table(frame).equals(NESTED)
    empty = TRACE_SCHEMA.empty_table()
    assert to_table(to_frame(empty), TRACE_SCHEMA).schema == TRACE_SCHEMA


@dg.asset
def table_asset() -> pd.DataFrame:
    return to_frame(NESTED, source="test", lock=None)


@dg.asset
def decision_asset(table_asset: pd.DataFrame) -> dict:
    return {"decision": "ship", "rows": len(table_asset), "source": table_asset.attrs["source"]}


partitions = dg.StaticPartitionsDefinition(["2026-11-20", "2026-11-21"])


@dg.asset(partitions_def=partitions)
def daily_asset(context: dg.AssetExecutionContext) -> pd.DataFrame:
    return to_frame(pa.table({"day": [context.partition_key]}))


def _roundtrip(io_manager: ObjectStoreIOManager, instance: dg.DagsterInstance) -> dg.Definitions:
    defs = dg.Definitions(
        assets=[table_asset, decision_asset, daily_asset], resources={"io_manager": io_manager}
    )
    result = dg.materialize(
        [table_asset, decision_asset], resources={"io_manager": io_manager}, instance=instance
    )
    assert result.success
    for day in partitions.get_partition_keys():
        assert dg.materialize(
            [daily_asset], resources={"io_manager": io_manager}, instance=instance, partition_key=day
        ).success
    return defs


def _check_values(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    with defs.get_asset_value_loader(instance) as loader:
        table = loader.load_asset_value("table_asset")
        decision = loader.load_asset_value("decision_asset")
        day = loader.load_asset_value("daily_asset", partition_key="2026-11-21")
    assert isinstance(table, pd.DataFrame) and to_table(table).equals(NESTED)
    assert table.attrs == {"source": "test", "lock": None}
    assert decision == {"decision": "ship", "rows": 3, "source": "test"}
    assert day["day"].tolist() == ["2026-11-21"]
    event = instance.get_latest_materialization_event(dg.AssetKey("table_asset"))
    metadata = event.asset_materialization.metadata
    assert metadata["dagster/row_count"].value == 3
    columns = [(c.name, c.type) for c in metadata["dagster/column_schema"].schema.columns]
    assert columns[:2] == [("qid", "string"), ("ids", "list<item: string>")]
    assert str(metadata["path"].value).endswith("table_asset.parquet")


def test_values_are_parquet_and_pickles_in_the_instance_storage_by_default(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        defs = _roundtrip(ObjectStoreIOManager(), instance)
        storage = tmp_path / "storage"
        assert (storage / "table_asset.parquet").read_bytes()[:4] == b"PAR1"
        assert (storage / "daily_asset" / "2026-11-20.parquet").exists()
        assert pickle.loads((storage / "decision_asset.pickle").read_bytes())["decision"] == "ship"
        _check_values(defs, instance)


def test_values_go_to_s3_when_configured_and_load_back_anywhere(tmp_path, bucket, s3_endpoint):
    name, client = bucket
    io_manager = ObjectStoreIOManager(base_uri=f"s3://{name}/io", endpoint_url=s3_endpoint)
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        defs = _roundtrip(io_manager, instance)
        keys = {item["Key"] for item in client.list_objects_v2(Bucket=name)["Contents"]}
        assert {
            "io/table_asset.parquet",
            "io/decision_asset.pickle",
            "io/daily_asset/2026-11-21.parquet",
        } <= keys
        assert not (tmp_path / "storage").exists() or not any((tmp_path / "storage").rglob("*.parquet"))
        _check_values(defs, instance)


@pytest.mark.system  # a Python subprocess
def test_a_value_loads_in_a_notebook_without_this_project(tmp_path):
    """What a notebook user gets: the Parquet file reads with pandas alone, the dict unpickles with no
    ragspine_pipeline class in it."""
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _roundtrip(ObjectStoreIOManager(), instance)
    script = (
        "import pickle, sys, pandas as pd\n"
        "frame = pd.read_parquet(sys.argv[1])\n"
        "value = pickle.load(open(sys.argv[2], 'rb'))\n"
        "assert list(frame.columns)[:2] == ['qid', 'ids'] and value['decision'] == 'ship'\n"
        "assert not [m for m in sys.modules if m.startswith('ragspine_pipeline')]\n"
    )
    storage = tmp_path / "storage"
    done = subprocess.run(
        [sys.executable, "-c", script, storage / "table_asset.parquet", storage / "decision_asset.pickle"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr


def test_an_object_folder_writes_whole_files_and_names_a_missing_one(tmp_path):
    folder = ObjectFolder(tmp_path / "reports")
    uri = folder.child("runs", "r1").write_text("a.json", '{"x": 1}', "report")
    assert uri == str(tmp_path / "reports" / "runs" / "r1" / "a.json")
    assert folder.child("runs", "r1").read_json("a.json", "report") == {"x": 1}
    assert folder.child("runs", "r1").names(".json") == ["a.json"]
    assert not list((tmp_path / "reports" / "runs" / "r1").glob(".*.tmp"))
    with pytest.raises(Exception, match=r"r1/b\.json: no report here"):
        folder.child("runs", "r1").read_json("b.json", "report")
    with pytest.raises(Exception, match="not a usable file name"):
        folder.child("..")


def test_a_local_object_folder_write_is_the_atomic_write(tmp_path, monkeypatch, fsynced):
    """files.replacing: the file synced, then its folder; a refused sync is a SourceError naming the
    location, and the old file stays."""
    folder = ObjectFolder(tmp_path / "reports")
    path = Path(folder.write_bytes("a.json", b"{}", "report"))
    assert [(s.st_dev, s.st_ino) for s in fsynced] == [
        (path.stat().st_dev, path.stat().st_ino),
        (path.parent.stat().st_dev, path.parent.stat().st_ino),
    ]

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(
        SourceError, match=r"reports/a\.json: cannot write the report: No space left on device"
    ):
        folder.write_bytes("a.json", b'{"new": 1}', "report")
    assert path.read_bytes() == b"{}" and sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def _fails_half_way(folder: ObjectFolder) -> None:
    with pytest.raises(RuntimeError, match="writer failed"), folder.open_output("a.bin", "value") as out:
        out.write(b"half of a value")
        raise RuntimeError("writer failed")


def test_a_writer_that_fails_half_way_leaves_the_old_file_or_none(tmp_path, bucket, s3_endpoint):
    name, _client = bucket
    for folder in (ObjectFolder(tmp_path / "io"), ObjectFolder(f"s3://{name}/io", endpoint_url=s3_endpoint)):
        _fails_half_way(folder)
        assert not folder.exists("a.bin")
        folder.write_bytes("a.bin", b"whole", "value")
        _fails_half_way(folder)
        assert folder.read_bytes("a.bin", "value") == b"whole"
    assert not list((tmp_path / "io").glob(".*.tmp"))


def test_an_unreachable_store_is_one_line_naming_the_location(closed_port, aws_env):
    endpoint = f"http://127.0.0.1:{closed_port}"
    # One attempt: the message is the subject here, not the retries (botocore's, tested elsewhere).
    fs = s3_filesystem(endpoint, max_attempts=1)
    folder = ObjectFolder(f"s3://bucket-{uuid.uuid4().hex[:8]}/reports", endpoint_url=endpoint, _fs=fs)
    with pytest.raises(Exception) as raised:
        folder.write_text("a.json", "{}", "report")
    message = str(raised.value)
    assert "reports/a.json" in message and "cannot write the report" in message and "\n" not in message


class Verdict(BaseModel):
    decision: str
    reasons: list[str] = []


@dg.asset
def verdict_asset() -> Verdict:
    return Verdict(decision="block", reasons=["recall@k fell"])


@dg.asset
def verdict_reader(verdict_asset: Verdict) -> int:
    assert isinstance(verdict_asset, Verdict)  # the step gets the model, not its JSON
    return len(verdict_asset.reasons)


def test_a_model_is_kept_as_its_json_and_read_back_as_the_model(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        assets = [verdict_asset, verdict_reader]
        result = dg.materialize(assets, resources={"io_manager": ObjectStoreIOManager()}, instance=instance)
        assert result.success and result.output_for_node("verdict_reader") == 1
        stored = tmp_path / "storage" / "verdict_asset.json"
        assert json.loads(stored.read_text()) == {"decision": "block", "reasons": ["recall@k fell"]}
        assert not (tmp_path / "storage" / "verdict_asset.pickle").exists()
        defs = dg.Definitions(assets=assets, resources={"io_manager": ObjectStoreIOManager()})
        with defs.get_asset_value_loader(instance) as loader:
            assert loader.load_asset_value("verdict_asset") == {
                "decision": "block",
                "reasons": ["recall@k fell"],
            }
            model = loader.load_asset_value("verdict_asset", python_type=Verdict)
        assert model == Verdict(decision="block", reasons=["recall@k fell"])
        # A value an earlier version pickled as a dict still reaches a step that takes the model.
        stored.unlink()
        old = {"decision": "ship", "reasons": []}
        (tmp_path / "storage" / "verdict_asset.pickle").write_bytes(pickle.dumps(old))
        again = dg.materialize(
            assets,
            resources={"io_manager": ObjectStoreIOManager()},
            instance=instance,
            selection="verdict_reader",
        )
        assert again.success and again.output_for_node("verdict_reader") == 0
