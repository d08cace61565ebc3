"""Where each object lives in a store: the one place store keys are spelled.

A store is a tree of write-once and derived objects; their keys are also the URL
paths a mirror serves, so a key changed in one place and not another would publish
objects nobody finds. Every module builds keys with these functions. Pure string
functions (the core imports no I/O), so the layout can be read on its own:

    pith-signing-key.json                       the key document (every signing key)
    keys/certs/<key_id>.json                    certificates of short-lived keys
    events/<ID>/<content_sha256>.json           events (write-once; the source of truth)
    events/<ID>/<content_sha256>.sig-<key>.json an event re-signed with another key
    pith/<ID>/bundle.json, pith/<ID>/state.json a record's bundle and merged state
    pith/<ID>/index.html                        the record's page (derived from its bundle)
    index.html                                  the store's home page (counts, look-up box)
    assets/<file>                               the pages' stylesheet and scripts
    .well-known/pith/<ID>/bundle.json           the bundle again, where mirrors look
    arxiv/<arXiv id>.json                       pointer from an arXiv id to its record
    quarantine/<run_id>.jsonl                   a run's rejected input, with reasons
    runs/<run_id>/manifest.json                 a finished run (written last)
    runs/backfill/<run_id>/chunk-<NNNN>.json    a backfill's finished chunks
    index/<table>/...                           the Delta index tables (each with its
                                                _delta_log/ of version notes)
    log/...                                     the transparency log (tiles, checkpoint)
    leases/<name>.json                          writer leases (which process writes what)
    staging/<run_id>/chunk-<NNNN>.jsonl         a window's staged build, until published
    raw/<source>/...                            harvested input, kept as it came
    maintenance/verify-watermark.json           the run manifests already checked
    .tmp/                                       a local store's temporary files (no key)
"""

from __future__ import annotations

import re

PUBLIC_KEY_FILE = "pith-signing-key.json"
EVENTS = "events/"
BUNDLES = "pith/"
WELL_KNOWN = ".well-known/pith/"
POINTERS = "arxiv/"
QUARANTINE = "quarantine/"
RUNS = "runs/"
INDEX = "index/"
ASSETS = "assets/"
LOG = "log/"
LEASES = "leases/"
STAGING = "staging/"
RAW = "raw/"
MAINTENANCE = "maintenance/"
CERTIFICATES = "keys/certs/"
#: The check's watermark (`maintenance.verify_changes`).
VERIFY_WATERMARK = f"{MAINTENANCE}verify-watermark.json"
#: Objects derived from the events, which a rebuild re-derives: bundles, states,
#: pages, their `.well-known` copies, page assets and arXiv pointers.
DERIVED = (BUNDLES, WELL_KNOWN, POINTERS, ASSETS)
#: Where a paper's objects are, each under `<prefix><ID>/`.
SUBJECTS = (EVENTS, BUNDLES, WELL_KNOWN)
#: The store's home page (at its root: `/` on a static host with an index document).
HOME_PAGE = "index.html"
#: Reserved for a store's own temporary files (a local store writes each object there
#: first): no object key starts with it.
TEMPORARY = ".tmp/"
#: The name of a record's page inside `pith/<ID>/`, so `/pith/<ID>/` serves it.
PAGE_NAME = "index.html"


def body_of(subject: str) -> str:
    """`ID` of a Pith number (`pith:ID` or a bare `ID`), as keys spell it."""
    return subject.rsplit(":", 1)[-1]


def bundle_paths(body: str) -> tuple[str, str, str]:
    """Storage keys (and URL paths) of a record's bundle, state and well-known bundle."""
    return (f"{BUNDLES}{body}/bundle.json", f"{BUNDLES}{body}/state.json", f"{WELL_KNOWN}{body}/bundle.json")


def page_key(body: str) -> str:
    """A record's page, beside its bundle: `/pith/<ID>/` serves it on a static host."""
    return f"{BUNDLES}{body}/{PAGE_NAME}"


def asset_key(name: str) -> str:
    """A store-wide static file of the pages (stylesheet, scripts), by its file name."""
    return f"{ASSETS}{name}"


def bundle_key(subject: str) -> str:
    """The bundle of a Pith number (or of its `ID`)."""
    return bundle_paths(body_of(subject))[0]


def event_prefix(body: str) -> str:
    """Where a record's events are listed."""
    return f"{EVENTS}{body}/"


def event_key(body: str, content_sha256: str) -> str:
    """An event object: named by its content hash, so its name proves its bytes."""
    return f"{EVENTS}{body}/{content_sha256}.json"


#: An event object's key: `events/<ID>/<content_sha256>[.sig-<key>].json`.
EVENT_OBJECT = re.compile(r"events/([A-Z2-7]{26})/([0-9a-f]{64})(?:\.sig-([A-Za-z0-9._-]+))?\.json")


def resigned_suffix(key_id: str) -> str:
    """How a re-signed copy's name carries its key id (only characters safe in a key)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", key_id)


def resigned_event_key(body: str, content_sha256: str, key_id: str) -> str:
    """An event's copy re-signed with `key_id` (beside the write-once original)."""
    return f"{EVENTS}{body}/{content_sha256}.sig-{resigned_suffix(key_id)}.json"


def pointer_key(arxiv_id: str) -> str:
    """The pointer from an arXiv id to the Pith number of its record."""
    return f"{POINTERS}{arxiv_id}.json"


def certificate_key(key_id: str) -> str:
    """The certificate of a short-lived (certified) key, beside the key document."""
    return f"{CERTIFICATES}{key_id}.json"


def quarantine_key(run_id: str) -> str:
    """A run's rejected input, one JSON line per record with its reason."""
    return f"{QUARANTINE}{run_id}.jsonl"


#: The `format` of a run manifest (`status` reads the newest one).
RUN_MANIFEST_FORMAT = "pith-run-manifest-v1"


def run_manifest_key(run_id: str) -> str:
    """A finished run's manifest (its presence says the run completed)."""
    return f"{RUNS}{run_id}/manifest.json"


def is_run_manifest(key: str) -> bool:
    """Whether a key under `runs/` is a run manifest (not a staged chunk or a
    backfill's chunk record)."""
    return key.startswith(RUNS) and key.endswith("/manifest.json")


def backfill_prefix(run_id: str) -> str:
    """Where a backfill records its finished chunks."""
    return f"{RUNS}backfill/{run_id}/"


def backfill_chunk_key(run_id: str, index: int) -> str:
    """One finished chunk of a backfill."""
    return f"{backfill_prefix(run_id)}chunk-{index:04d}.json"


def lease_key(name: str) -> str:
    """A writer lease's object (`storage.lease`)."""
    return f"{LEASES}{name}.json"


def staging_prefix(run_id: str) -> str:
    """Where a window's staged build lives until it is published."""
    return f"{STAGING}{run_id}/"


def staged_key(run_id: str, index: int, token: str = "") -> str:
    """A staged chunk. `token` (each build its own) keeps apart two runs of one window
    building at once: each reads and deletes only the staged chunks it wrote."""
    return f"{staging_prefix(run_id)}chunk-{index:04d}{'-' + token if token else ''}.jsonl"


def staged_rejects_key(staged: str) -> str:
    """Where the staged chunk `staged` keeps its quarantine entries: an object of its
    own, so the header (read by every later task) stays small however much was rejected."""
    return staged.removesuffix(".jsonl") + ".rejects.jsonl"


# -- parsing keys back ------------------------------------------------------------


def pointer_id(key: str) -> str | None:
    """The arXiv id a pointer key names (`pointer_key`'s inverse), or None."""
    if key.startswith(POINTERS) and key.endswith(".json"):
        return key[len(POINTERS) : -len(".json")]
    return None


def subject_of(key: str) -> tuple[str, str] | None:
    """(prefix, record ID) of a key under one of `SUBJECTS` (`events/<ID>/...`,
    `pith/<ID>/...`, `.well-known/pith/<ID>/...`), or None."""
    for prefix in SUBJECTS:
        if key.startswith(prefix):
            return prefix, key[len(prefix) :].split("/", 1)[0]
    return None


def is_derived(key: str) -> bool:
    """Whether a rebuild re-derives the object (`DERIVED`)."""
    return key.startswith(DERIVED)
