"""RFC 8785 (JCS) canonical JSON, with a fast path proven equal to the reference.

`rfc8785.dumps` is the reference. orjson with sorted keys produces the same bytes
for strings, booleans, null, integers within +-2**53 and object keys below U+D800
(RFC 8785 sorts keys by UTF-16 code units, orjson by code points, and the two
orders differ only for keys with characters at or above U+D800). `dumps` checks
each value once and uses orjson only where the output is identical; anything else
goes through the reference implementation. Floats are refused: the format has
none, and guessing their canonical form is how hashes silently diverge.

`CanonicalJSON` bundles these as the strategy the core's builders are given (`canon=`):
`FAST`, every run's, and `REFERENCE`, rfc8785 for every hash and no trusted shortcut,
which tests and benchmarks inject to prove the fast one writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import rfc8785

from pith_pipeline.errors import CanonicalJSONError, IntegrityError

MAX_SAFE_INT = 2**53 - 1
_ORJSON_OPTS = orjson.OPT_SORT_KEYS
_TRUSTED_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_SURROGATE_START = "\ud800"


def _fast_ok(value: Any, depth: int = 0) -> bool:
    """True when orjson's sorted output is byte-equal to RFC 8785 for `value`.

    Raises CanonicalJSONError for values that have no exact canonical form. The
    whole value is always walked, so a refusal is never hidden behind a fallback.
    Strings, the commonest leaves, are checked inline (this runs on every hash).
    """
    if depth > 200:  # orjson refuses deep nesting; the reference handles it
        return False
    t = type(value)
    if t is str or value is None or t is bool:
        return True
    if t is dict:
        ok = True
        for k, v in value.items():
            if type(k) is not str:
                raise CanonicalJSONError(f"object key {k!r} is not a string")
            if not k.isascii() and max(k) >= _SURROGATE_START:
                ok = False
            if type(v) is not str and not _fast_ok(v, depth + 1):
                ok = False
        return ok
    if t is list or t is tuple:
        ok = True
        for v in value:
            if type(v) is not str and not _fast_ok(v, depth + 1):
                ok = False
        return ok
    if t is int:
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return True
        raise CanonicalJSONError(f"integer {value} is outside +-2**53 and has no exact JSON form")
    if t is float:
        raise CanonicalJSONError(f"float {value!r} refused: canonical JSON here carries no floats")
    if isinstance(value, bool | int | str | dict | list):
        return False  # subclasses: let the reference decide
    raise CanonicalJSONError(f"value of type {t.__name__} cannot be canonical JSON")


def dumps_reference(value: Any) -> bytes:
    """The reference RFC 8785 serialisation (slow, pure Python)."""
    _fast_ok(value)  # same refusals as the fast path
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, RecursionError) as exc:
        raise CanonicalJSONError(f"cannot canonicalise value: {exc}") from exc


def dumps(value: Any) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of `value`."""
    if _fast_ok(value):
        try:
            return orjson.dumps(value, option=_ORJSON_OPTS)
        except orjson.JSONEncodeError:
            pass  # lone surrogates, recursion limits: the reference decides
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, RecursionError) as exc:
        raise CanonicalJSONError(f"cannot canonicalise value: {exc}") from exc


def dumps_trusted(value: Any) -> bytes:
    """Fast path for objects this package built itself from checked parts.

    The caller guarantees what `_fast_ok` would check (no floats, keys below
    U+D800); integers beyond +-2**53 are still refused (orjson's strict-integer
    mode raises and the checked path names the value). Property tests hold both
    paths equal on such values.
    """
    try:
        return orjson.dumps(value, option=_TRUSTED_OPTS)
    except orjson.JSONEncodeError:
        return dumps(value)


def fast_safe(value: Any) -> bool:
    """True when `dumps_trusted(value)` is proven equal to the reference for `value`.

    For the small untrusted parts (aliases, key documents) of an object the builder
    otherwise made itself; raises CanonicalJSONError like `dumps` would.
    """
    return _fast_ok(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(value: Any) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of `value` (spec section 1)."""
    return hashlib.sha256(dumps(value)).hexdigest()


def _never_fast(value: Any) -> bool:
    """`fast_safe` of the reference: nothing is taken on trust (refusals as `dumps`)."""
    _fast_ok(value)
    return False


@dataclass(frozen=True, slots=True, eq=False)
class CanonicalJSON:
    """How the core serialises and hashes canonical JSON: the strategy every function
    that builds a record, event, state or bundle takes as `canon=` (default `FAST`).

    `dumps`: RFC 8785 bytes of any value, checked. `dumps_trusted`: the same bytes for
    a value the builder assembled from checked parts (see `dumps_trusted`).
    `fast_safe(value)`: True when `dumps_trusted` is proven equal to the reference on
    `value`, False sends the caller to `dumps`; both raise `CanonicalJSONError` on a
    value with no canonical form. `trust`: the merge and builders may skip re-hashing
    and re-verifying event objects the caller made itself (`trusted=`), and a fresh
    record's state may be written without the general merge; False: everything is
    recomputed. Compared by identity: a strategy is a named constant, and per-strategy
    tables (a fresh paper's empty graph sections) are cached by it.
    """

    name: str
    dumps: Callable[[Any], bytes]
    dumps_trusted: Callable[[Any], bytes]
    fast_safe: Callable[[Any], bool]
    trust: bool

    def sha256(self, value: Any) -> str:
        """Lowercase hex SHA-256 of `dumps(value)` (spec section 1)."""
        return hashlib.sha256(self.dumps(value)).hexdigest()

    def sha256_trusted(self, value: Any) -> str:
        """Lowercase hex SHA-256 of `dumps_trusted(value)`."""
        return hashlib.sha256(self.dumps_trusted(value)).hexdigest()


#: every run's: orjson where it is proven equal to RFC 8785, trusted shortcuts taken
FAST = CanonicalJSON("fast", dumps, dumps_trusted, fast_safe, trust=True)
#: the straightforward reference: rfc8785 for every hash, nothing taken on trust
REFERENCE = CanonicalJSON("reference", dumps_reference, dumps_reference, _never_fast, trust=False)


class DuplicateKeyError(ValueError):
    """A JSON object repeats a key: readers disagree on which value counts."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateKeyError(f"duplicate key {k!r} in a JSON object")
            seen.add(k)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: bytes | str) -> Any:
    """Parse JSON strictly; a repeated key in any object raises `DuplicateKeyError`.

    orjson (like Python's json) keeps the last of two equal keys and other parsers
    keep the first, so a file with duplicates says two things at once: refused.
    Fast path: when serialising the parsed value gives back the input bytes (our
    own compact and pretty files), the input cannot have held a duplicate, since
    the same bytes cannot hold more members than the output has. Anything else is
    re-read by the standard library with a hook that sees every member. Integers
    beyond 64 bits come back as floats (orjson) and are refused by `dumps`.
    """
    value = orjson.loads(data)  # strict UTF-8, no NaN/Infinity, no trailing commas
    if type(value) is not dict and type(value) is not list:
        return value  # a scalar has no object to repeat a key in
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    text = raw.strip(b" \t\r\n")
    try:
        if orjson.dumps(value) == text or orjson.dumps(value, option=orjson.OPT_INDENT_2) == text:
            return value
    except orjson.JSONEncodeError:
        pass
    try:
        json.loads(raw, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    return value


def loads_stored(data: bytes, key: str) -> Any:
    """`loads` for a stored object: anything unreadable is an `IntegrityError` naming
    `key` (one line for a person, exit code and all), never a bare `ValueError`.

    For readers that cannot go on without the object (a run manifest, a staged chunk,
    a bundle to re-sign); readers that report and go on catch `ValueError` instead.
    """
    try:
        return loads(data)
    except (ValueError, RecursionError) as exc:
        raise IntegrityError(f"not valid JSON ({str(exc)[:160]})", key=key) from None


def dumps_pretty(value: Any) -> bytes:
    """Human-readable output that keeps key order (for published files and the CLI)."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2)


def dumps_compact(value: Any) -> bytes:
    """Compact output in insertion order, as the registry publishes its files."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise CanonicalJSONError(f"cannot serialise value: {exc}") from exc
