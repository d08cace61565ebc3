"""What `import pith_pipeline.cli` pulls in: every command and every `build` worker pays it.

Worker processes are started with `spawn`, which runs the `pith-pipeline` script
again (it imports `pith_pipeline.cli`), so a module imported there for one command
only (the HTTP clients `ingest` harvests with) is paid by every process of every run.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: imported by `ingest` when it runs, never by merely loading the command line
HARVEST_ONLY = (
    "pith_pipeline.ingest",
    "pith_pipeline.sources.oai",
    "pith_pipeline.sources.arxiv_api",
    "arxiv",
    "requests",
    "httpx2",
    "oaipmh_scythe",
)


def test_loading_the_command_line_imports_no_harvesting_client() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import json, sys, pith_pipeline.cli; print(json.dumps(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    loaded = set(json.loads(out))
    assert sorted(m for m in HARVEST_ONLY if m in loaded) == []


def test_the_ingest_options_name_the_sources_own_defaults() -> None:
    from pith_pipeline.cli import ingest as cli_ingest
    from pith_pipeline.sources import arxiv_api, oai

    assert (cli_ingest.DEFAULT_OAI_URL, cli_ingest.OAI_URL_ENV) == (oai.DEFAULT_OAI_URL, oai.OAI_URL_ENV)
    assert (cli_ingest.DEFAULT_API_URL, cli_ingest.API_URL_ENV) == (
        arxiv_api.DEFAULT_API_URL,
        arxiv_api.API_URL_ENV,
    )


def test_a_build_worker_imports_no_query_engine() -> None:
    """A worker checks index rows and spills them (`index.rows`, `index.sink`): the
    package's query side (pyarrow.dataset) is imported only where a table is read."""
    code = (
        "import json, sys, pith_pipeline.cli, pith_pipeline.parallel, pith_pipeline.index.rows, "
        "pith_pipeline.index.sink, pyarrow.parquet; print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "pyarrow.dataset" not in json.loads(out)
