"""Constants the signer tests share, in a module of its own: `from conftest import`
finds whichever `conftest` another test directory put on `sys.path` first."""

from pathlib import Path

KMS_ALIAS = "alias/pith-signing"
SAMPLE = Path(__file__).parent.parent / "data" / "arxiv-sample.jsonl"
