"""Store keys are spelled in one module; these are the keys published stores already use."""

from __future__ import annotations

import pytest

from pith_pipeline.core import layout

BODY = "QWERTYUIOPASDFGHJKLZXCVBNM"
SHA = "ab" * 32


def test_keys_are_those_of_published_stores() -> None:
    assert layout.bundle_paths(BODY) == (
        f"pith/{BODY}/bundle.json",
        f"pith/{BODY}/state.json",
        f".well-known/pith/{BODY}/bundle.json",
    )
    assert layout.bundle_key(f"pith:{BODY}") == layout.bundle_key(BODY) == f"pith/{BODY}/bundle.json"
    assert layout.event_key(BODY, SHA) == f"events/{BODY}/{SHA}.json"
    assert layout.event_prefix(BODY) == f"events/{BODY}/"
    assert layout.pointer_key("1909.11150") == "arxiv/1909.11150.json"
    assert layout.certificate_key("k-1") == "keys/certs/k-1.json"
    assert layout.quarantine_key("R1") == "quarantine/R1.jsonl"
    assert layout.run_manifest_key("R1") == "runs/R1/manifest.json"
    assert layout.backfill_chunk_key("R1", 7) == "runs/backfill/R1/chunk-0007.json"
    assert layout.backfill_prefix("R1") == "runs/backfill/R1/"
    assert layout.PUBLIC_KEY_FILE == "pith-signing-key.json"


@pytest.mark.parametrize(
    ("key_id", "suffix"),
    [("pith-local-2026-06-ab12", "pith-local-2026-06-ab12"), ("alias/pith key", "alias_pith_key")],
)
def test_a_resigned_copy_names_its_key_safely_and_is_recognised(key_id: str, suffix: str) -> None:
    key = layout.resigned_event_key(BODY, SHA, key_id)
    assert key == f"events/{BODY}/{SHA}.sig-{suffix}.json"
    match = layout.EVENT_OBJECT.fullmatch(key)
    assert match is not None and match.groups() == (BODY, SHA, suffix)
    assert layout.EVENT_OBJECT.fullmatch(layout.event_key(BODY, SHA)) is not None
