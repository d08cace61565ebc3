"""Record pages on S3 (moto's server on 127.0.0.1): written with the right Content-Type
for website hosting, not rewritten by a run that did not change their paper, checked
by `verify s3://...`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from pages_store import BODY, clean_env, cli

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "arxiv-sample.jsonl"


def _versions(bucket: str, prefix: str) -> dict[str, str]:
    """Key -> the version id of its newest object (a bucket with versioning: every PUT
    makes a new version, so an unchanged id is an object not written again)."""
    s3 = boto3.client("s3")
    out: dict[str, str] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            if v["IsLatest"]:
                out[v["Key"]] = v["VersionId"]
    return out


@pytest.fixture
def built(s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """(store URL, signing key path): the sample built into a versioned bucket."""
    clean_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    boto3.client("s3").put_bucket_versioning(Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"})
    code, out = cli("keys", "generate", "--out", "keys")
    assert code == 0, out
    url = f"s3://{s3_bucket}/store"
    code, out = cli("build", "--input", str(SAMPLE), "--store", url, "--key", "keys/pith-private-key.json")
    assert code == 0, out
    return url, "keys/pith-private-key.json"


def _pages(bucket: str) -> dict[str, str]:
    return {k: v for k, v in _versions(bucket, "store/pith/").items() if k.endswith("/index.html")}


def test_pages_on_s3_are_html_and_a_second_run_writes_none(built: tuple[str, str], s3_bucket: str) -> None:
    url, key = built
    s3 = boto3.client("s3")
    bundles = [k for k in _versions(s3_bucket, "store/pith/") if k.endswith("/bundle.json")]
    pages = _pages(s3_bucket)
    assert len(bundles) == 30
    assert set(pages) == {k.replace("/bundle.json", "/index.html") for k in bundles}
    head: dict[str, Any] = s3.head_object(Bucket=s3_bucket, Key=next(iter(pages)))
    assert head["ContentType"] == "text/html; charset=utf-8"
    assert (
        s3.head_object(Bucket=s3_bucket, Key="store/index.html")["ContentType"] == "text/html; charset=utf-8"
    )
    assert (
        s3.head_object(Bucket=s3_bucket, Key="store/assets/pith.css")["ContentType"]
        == "text/css; charset=utf-8"
    )
    assert (
        s3.head_object(Bucket=s3_bucket, Key="store/assets/pith-lookup.js")["ContentType"]
        == "text/javascript; charset=utf-8"
    )
    # the home page's figures, counted in one listing stream per first character
    home_page = s3.get_object(Bucket=s3_bucket, Key="store/index.html")["Body"].read().decode()
    pointers = [k for k in _versions(s3_bucket, "store/arxiv/") if k.endswith(".json")]
    assert 'data-pith-records="30">' in home_page
    assert f'data-pith-papers="{len(pointers)}">' in home_page
    assets = _versions(s3_bucket, "store/assets/")
    home = _versions(s3_bucket, "store/index.html")
    code, out = cli("build", "--input", str(SAMPLE), "--store", url, "--key", key)
    assert code == 0 and "unchanged 30" in out, out
    assert _pages(s3_bucket) == pages
    assert _versions(s3_bucket, "store/assets/") == assets
    assert _versions(s3_bucket, "store/index.html") == home  # nothing changed: not even the home page


def test_verify_s3_names_a_tampered_and_a_missing_page(built: tuple[str, str], s3_bucket: str) -> None:
    url, _key = built
    s3 = boto3.client("s3")
    pages = sorted(_pages(s3_bucket))
    tampered, missing = pages[0], pages[1]
    html = s3.get_object(Bucket=s3_bucket, Key=tampered)["Body"].read()
    s3.put_object(Bucket=s3_bucket, Key=tampered, Body=html.replace(b"Record created", b"Record forged"))
    s3.delete_object(Bucket=s3_bucket, Key=missing)
    code, out = cli("verify", url, "--quiet")
    assert code == 1, out
    tampered_key, missing_key = (k.removeprefix("store/") for k in (tampered, missing))
    assert BODY.search(tampered_key) and BODY.search(missing_key)
    assert f"{url}/{tampered_key}: differs from the page" in out
    assert f"{url}/{missing_key}: missing (the page of" in out
