"""The core imports no network, cloud or Parquet library (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pith_pipeline.core

# (`socket` itself is loaded by the standard library's email.utils, used for RFC 2822 dates)
FORBIDDEN = (
    "boto3",
    "botocore",
    "pyarrow",
    "duckdb",
    "httpx",
    "httpx2",
    "requests",
    "urllib3",
    "airflow",
    "arxiv",
    "oaipmh_scythe",
    "http.client",
    "urllib.request",
    "ssl",
)


def test_core_modules_import_no_io_libraries() -> None:
    modules = [f"pith_pipeline.core.{m.name}" for m in pkgutil.iter_modules(pith_pipeline.core.__path__)]
    assert "pith_pipeline.core.verify" in modules
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(json.loads(out.stdout))
    bad = sorted(m for m in loaded if m in FORBIDDEN or m.split(".")[0] in FORBIDDEN[:11])
    assert bad == [], f"core imports {bad}"
