"""The index manifest: local and S3, missing → ManifestMissing, malformed → InputError."""

from __future__ import annotations

import json
import time

import pytest

from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import SourceError
from ragspine_pipeline.sources.manifest import IndexManifest, ManifestMissing, read_manifest
from tests.conftest import SECRET_KEY

MANIFEST = {
    "index_version": "2024-05-01.3",
    "built_at": "2024-05-01T02:00:00Z",
    "corpus_hash": "abc",
    "docs": 12,
}


def test_local_manifest_keeps_extra_fields(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(MANIFEST), encoding="utf-8")
    for uri in (str(path), f"file://{path}"):
        manifest = read_manifest(uri)
        assert manifest == IndexManifest(**MANIFEST)
        assert manifest.index_version == "2024-05-01.3"
        assert (manifest.built_at, manifest.corpus_hash) == ("2024-05-01T02:00:00Z", "abc")
        assert manifest.model_extra == {"docs": 12}


def test_only_index_version_is_required(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"index_version": 7}', encoding="utf-8")
    manifest = read_manifest(str(path))
    assert (manifest.index_version, manifest.built_at, manifest.corpus_hash) == ("7", None, None)


def test_s3_manifest(bucket, s3_endpoint):
    name, client = bucket
    client.put_object(Bucket=name, Key="index/manifest.json", Body=json.dumps(MANIFEST).encode())
    assert read_manifest(f"s3://{name}/index/manifest.json", endpoint_url=s3_endpoint) == IndexManifest(
        **MANIFEST
    )


def test_missing_manifest(tmp_path, bucket, s3_endpoint):
    name, _ = bucket
    with pytest.raises(ManifestMissing, match="no index manifest at this location"):
        read_manifest(str(tmp_path / "absent.json"))
    with pytest.raises(ManifestMissing) as info:
        read_manifest(f"s3://{name}/index/absent.json", endpoint_url=s3_endpoint)
    assert isinstance(info.value, SourceError)
    assert str(info.value) == f"s3://{name}/index/absent.json: no index manifest at this location"


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('["index_version"]', None, "expected a JSON object, got array"),
        ('{"built_at": "2024-05-01"}', "index_version", "Field required"),
        ('{"index_version": "  "}', "index_version", "must not be empty"),
        ('{"index_version": ["v1"]}', "index_version", "valid string"),
        ('{"index_version": "v1",', None, "malformed JSON"),
    ],
)
def test_malformed_manifest_is_an_input_error(tmp_path, bucket, s3_endpoint, text, field, message):
    name, client = bucket
    path = tmp_path / "manifest.json"
    path.write_text(text, encoding="utf-8")
    client.put_object(Bucket=name, Key="manifest.json", Body=text.encode())
    for uri, kwargs in ((str(path), {}), (f"s3://{name}/manifest.json", {"endpoint_url": s3_endpoint})):
        with pytest.raises(InputError) as info:
            read_manifest(uri, **kwargs)
        assert info.value.file == uri
        assert info.value.field == field
        assert message in str(info.value) and "\n" not in str(info.value)


def test_unreachable_store_is_a_source_error(aws_env, closed_port):
    started = time.monotonic()
    with pytest.raises(SourceError) as info:
        read_manifest(
            "s3://bucket/manifest.json", endpoint_url=f"http://127.0.0.1:{closed_port}", max_attempts=2
        )
    assert not isinstance(info.value, ManifestMissing)
    assert time.monotonic() - started < 5
    assert str(info.value).startswith("s3://bucket/manifest.json: cannot read the index manifest:")
    assert SECRET_KEY not in str(info.value)


def test_a_directory_or_a_bucket_uri_is_not_a_manifest(tmp_path):
    with pytest.raises(InputError, match="directory"):
        read_manifest(str(tmp_path))
    with pytest.raises(InputError, match="must name an object"):
        read_manifest("s3://bucket/")
