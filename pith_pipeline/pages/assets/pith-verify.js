/*
 * pith-verify.js: a record page checks its own bundle in the reader's browser.
 *
 * The same checks as `pith-pipeline verify` (pith_pipeline/core/verify.py), by the
 * same names, ported line by line so that both verifiers agree on every bundle:
 * the canonical SHA-256 of the record (RFC 8785), the Pith number, the aliases, the
 * listed keys, the receipt, every event's hash, id and Ed25519 signature, the bundle
 * hash and signature, the merged state recomputed (core/merge.py), the keys used,
 * the pinned fingerprint and the keys' trust against the registry's key document.
 * Then what only a page can do: the title and abstract the page shows hash to the
 * record's, and, where the store keeps a transparency log, each event is included
 * under the log's signed checkpoint.
 *
 * Inputs (attributes of <html>): data-pith-bundle (the bundle's URL, relative),
 * data-pith-keys (the key document's), data-pith-log (the log's prefix, optional).
 * A fingerprint the reader pins comes from the URL fragment: #pin=<hex fingerprint>.
 * Output: data-pith-verdict on <html> is `verified` or `failed: <check name>`;
 * #pith-verdict gets the verdict in words, #pith-checks one <li> per check.
 *
 * No build step, no third-party code; the only network reads are the relative URLs
 * above. Any error of this script is a failure, never a pass.
 */

// -- the checks, by name (core/verify.py: CHECKS, PAGE_CHECKS) -----------------------

const CHECKS = [
  "canonical_hash",
  "pith_number",
  "source_aliases",
  "public_keys",
  "receipt",
  "event_hashes",
  "event_ids",
  "event_signatures",
  "bundle_hash",
  "bundle_signature",
  "state",
  "keys_listed",
  "pinned_key",
  "key_trust",
];
/** Every check the page reports, in the order the verdict names the first failure. */
export const PAGE_CHECKS = ["bundle", "key_document", ...CHECKS, "text_hashes", "log"];
/** The verdict's name when this script itself failed (not a check of the bundle). */
export const SCRIPT_FAILURE = "script";

const OK = "ok";
const FAIL = "fail";
const WARN = "warn";
const SKIP = "skip";
const MAX_BUNDLE_BYTES = 64 * 1024 * 1024; // pith_pipeline.audit.MAX_BUNDLE_BYTES
const MAX_SAFE = 2 ** 53 - 1;
const MAX_DEPTH = 1024; // orjson's: deeper JSON is unreadable to the Python verifier too

const SIGNATURE_STATUS = "signed_v1";
const EVENT_SIGNED_MESSAGE = "open_graph_event_sha256_bytes";
const RECEIPT_SIGNED_MESSAGE = "canonical_sha256_bytes";
const BUNDLE_SIGNED_MESSAGE = "bundle_sha256_bytes";
const RECEIPT_REISSUED = "receipt_reissued";
const MERGE_VERSION = "pith-open-graph-merge-v1";
const CERTIFICATE_KIND = "pith_key_certificate";
const CERTIFICATE_SIGNED_MESSAGE = "key_certificate_sha256_bytes";
const CERTIFICATE_SIGNATURE_FIELDS = [
  "algorithm",
  "key_id",
  "public_key_fingerprint",
  "signed_message",
  "signature_b64",
  "signed_at",
];
const EVENT_SIGNATURE_FIELDS = [
  "signature_status",
  "algorithm",
  "key_id",
  "public_key_fingerprint",
  "signature_b64",
  "signed_message",
  "signed_at",
];
const BUNDLE_SIGNATURE_FIELDS = [...EVENT_SIGNATURE_FIELDS, "bundle_sha256"];
const RECEIPT_FIELDS = [
  ...EVENT_SIGNATURE_FIELDS,
  "kind",
  "builder_version",
  "receipt_version",
  "canonical_sha256",
  "last_reissued_at",
  "first_computed_at",
];
const EVENT_TYPES = new Map([
  ["record_created", ["record", null]],
  ["graph_snapshot", ["graph", "graph_snapshots"]],
  ["author_attestation", ["record", "author_attestations"]],
  ["timestamp_anchor", ["record", "timestamp_anchors"]],
  ["storage_attestation", ["record", "storage_attestations"]],
  ["citation_signature", ["record", "citation_signatures"]],
  ["replication_record", ["record", "replication_records"]],
  ["correction", ["record", "corrections"]],
  ["mirror_hint", ["record", "mirror_hints"]],
]);
const CURRENT_LISTS = [
  "graph_snapshots",
  "author_attestations",
  "timestamp_anchors",
  "storage_attestations",
  "citation_signatures",
  "replication_records",
  "corrections",
  "mirror_hints",
];
const UNHASHED_FIELDS = ["signature", "content_sha256", "event_id"];
const SIGNER_FIELDS = ["signer_id", "signer_type", "key_id", "public_key_fingerprint"];
// Python's str.isspace(): what core/text.py collapses (JavaScript's \s differs)
const PY_SPACE = "[\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const PY_SPACES = new RegExp(PY_SPACE + "+", "u");
const PY_SPACE_ONE = new RegExp(PY_SPACE, "u");
const EXCERPT_CHARS = 600; // core/events.py: abstract_excerpt = abstract[:600]

// -- Python's values and errors ------------------------------------------------------

/** A JSON number Python reads as a float, or an integer beyond +-2**53: no canonical form. */
class PyNum {
  constructor(text, isFloat) {
    this.text = text;
    this.isFloat = isFloat;
    this.value = Number(text);
  }
}
/** A malformed part: the check fails with this message (verify.py's _Bad). */
class Bad extends Error {}
class CanonicalJSONError extends Error {}
/** What Python raises as ValueError/TypeError/KeyError...: a malformed bundle. */
class Malformed extends Error {}

const hasOwn = (o, k) => Object.prototype.hasOwnProperty.call(o, k);
const isStr = (v) => typeof v === "string";
const isList = (v) => Array.isArray(v);
const isDict = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof PyNum);
/** dict.get(k): null when absent (Python's None). */
const get = (d, k, dflt = null) => (hasOwn(d, k) ? d[k] : dflt);
/** `d.get(k)` on a value that must be a dict (AttributeError otherwise). */
function dget(d, k, dflt = null) {
  if (!isDict(d)) throw new Malformed(`'${pyType(d)}' object has no attribute 'get'`);
  return get(d, k, dflt);
}
function pyType(v) {
  if (v === null || v === undefined) return "NoneType";
  if (typeof v === "boolean") return "bool";
  if (typeof v === "number") return "int";
  if (v instanceof PyNum) return v.isFloat ? "float" : "int";
  if (isStr(v)) return "str";
  if (isList(v)) return "list";
  return "dict";
}
function truthy(v) {
  if (v === null || v === undefined || v === false) return false;
  if (v === true) return true;
  if (typeof v === "number") return v !== 0;
  if (v instanceof PyNum) return v.value !== 0;
  if (isStr(v) || isList(v)) return v.length > 0;
  return Object.keys(v).length > 0;
}
/** Python's hashability: a list or dict as a set member or dict key raises TypeError. */
function hashable(v) {
  if (isList(v) || isDict(v)) throw new Malformed(`unhashable type: '${pyType(v)}'`);
  return v;
}
/** Python's str() for the values a bundle holds (keys, ids, times). */
function pyStr(v) {
  if (isStr(v)) return v;
  if (v === null || v === undefined) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "number") return String(v);
  if (v instanceof PyNum) return v.isFloat ? pyFloatRepr(v.value) : BigInt(v.text).toString();
  if (isList(v)) return "[" + v.map(pyRepr).join(", ") + "]";
  return "{" + Object.keys(v).map((k) => pyRepr(k) + ": " + pyRepr(v[k])).join(", ") + "}";
}
function pyRepr(v) {
  return isStr(v) ? "'" + v.replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "'" : pyStr(v);
}
function pyFloatRepr(x) {
  if (!Number.isFinite(x)) return x > 0 ? "inf" : x < 0 ? "-inf" : "nan";
  const [mant, exp] = x.toExponential().split("e");
  const e = Number(exp);
  if (e < -4 || e >= 16) return `${mant}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  const s = String(x);
  return s.includes(".") || s.includes("e") ? s : s + ".0";
}
/** Python's == for JSON values (1 == True, 1 == 1.0; dicts and lists by content). */
function pyEq(a, b) {
  const num = (v) => (typeof v === "boolean" ? Number(v) : typeof v === "number" ? v : v instanceof PyNum ? v.value : undefined);
  const na = num(a);
  const nb = num(b);
  if (na !== undefined || nb !== undefined) return na !== undefined && nb !== undefined && na === nb;
  if (a === null || a === undefined || b === null || b === undefined) return (a ?? null) === (b ?? null);
  if (isStr(a) || isStr(b)) return a === b;
  if (isList(a) || isList(b)) return isList(a) && isList(b) && a.length === b.length && a.every((x, i) => pyEq(x, b[i]));
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => hasOwn(b, k) && pyEq(a[k], b[k]));
}
/** Iterating a value as Python does (a string by characters, a dict by keys). */
function pyIter(v) {
  if (isList(v)) return v;
  if (isStr(v)) return Array.from(v);
  if (isDict(v)) return Object.keys(v);
  throw new Malformed(`'${pyType(v)}' object is not iterable`);
}
/** Python's string order: by code point (JavaScript's < compares UTF-16 units). */
function cmpStr(a, b) {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      const sx = x >= 0xd800 && x <= 0xdfff;
      const sy = y >= 0xd800 && y <= 0xdfff;
      if (sx === sy) return x < y ? -1 : 1;
      return sx ? 1 : -1; // a surrogate half stands for a code point above U+FFFF
    }
  }
  return a.length < b.length ? -1 : a.length > b.length ? 1 : 0;
}
const cpLength = (s) => Array.from(s).length;
/** Python's dict(a) on one alias: a copy of a dict, or pairs; anything else raises. */
function pyDict(a) {
  if (isDict(a)) return Object.assign(Object.create(null), a);
  const out = Object.create(null);
  if (isStr(a) && a === "") return out;
  if (!isList(a)) throw new Malformed(`cannot convert ${pyType(a)} to a dict`);
  for (const el of a) {
    const pair = isList(el) ? el : isStr(el) ? Array.from(el) : isDict(el) ? Object.keys(el) : null;
    if (pair === null || pair.length !== 2) throw new Malformed("dictionary update sequence element has the wrong length");
    hashable(pair[0]);
    if (!isStr(pair[0])) throw new CanonicalJSONError(`object key ${pyRepr(pair[0])} is not a string`);
    out[pair[0]] = pair[1];
  }
  return out;
}

// -- strict JSON (pith_pipeline.core.canonical_json.loads) -------------------------------

/**
 * Parse JSON as the Python verifier reads it: strict UTF-8 and grammar, no
 * duplicate keys, lone surrogates refused, at most MAX_DEPTH levels; numbers keep
 * Python's types (an integer lexeme is an int, any other a float, and only
 * integers within +-2**53 have a canonical form).
 */
export function parseJson(input) {
  const text = typeof input === "string" ? input : new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(input);
  let i = 0;
  const fail = (why) => {
    throw new Malformed(`${why} at character ${i}`);
  };
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const hex4 = () => {
    const h = text.slice(i, i + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) fail("invalid escaped sequence in string");
    i += 4;
    return parseInt(h, 16);
  };
  const string = () => {
    i++; // the opening quote
    let out = "";
    let start = i;
    for (;;) {
      if (i >= text.length) fail("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(start, i);
        i++;
        return out;
      }
      if (c < 0x20) fail("unexpected control character in string");
      if (c === 0x5c) {
        out += text.slice(start, i);
        const e = text[i + 1];
        i += 2;
        const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
        if (e === "u") {
          const u = hex4();
          if (u >= 0xdc00 && u <= 0xdfff) fail("invalid high surrogate in string");
          if (u >= 0xd800 && u <= 0xdbff) {
            if (text[i] !== "\\" || text[i + 1] !== "u") fail("no low surrogate in string");
            i += 2;
            const lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("invalid low surrogate in string");
            out += String.fromCharCode(u, lo);
          } else out += String.fromCharCode(u);
        } else if (e !== undefined && hasOwn(simple, e)) out += simple[e];
        else fail("invalid escaped sequence in string");
        start = i;
        continue;
      }
      i++;
    }
  };
  const number = () => {
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 4096));
    if (!m || m[0] === "-") fail("invalid number");
    const lexeme = m[0];
    const after = text[i + lexeme.length];
    if (after !== undefined && /[0-9.eE+-]/.test(after)) fail("invalid number");
    i += lexeme.length;
    if (!Number.isFinite(Number(lexeme))) fail("number is infinity when parsed as double");
    if (m[1] === undefined && m[2] === undefined) {
      const big = BigInt(lexeme);
      if (big >= -BigInt(MAX_SAFE) && big <= BigInt(MAX_SAFE)) return Number(big);
      return new PyNum(lexeme, false);
    }
    return new PyNum(lexeme, true);
  };
  const value = (depth) => {
    ws();
    const c = text[i];
    if (c === "{") {
      if (depth >= MAX_DEPTH) fail("depth limit exceeded");
      i++;
      const obj = Object.create(null);
      ws();
      if (text[i] === "}") {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        const k = string();
        if (hasOwn(obj, k)) fail(`duplicate key ${JSON.stringify(k)} in a JSON object`);
        ws();
        if (text[i] !== ":") fail("expected ':'");
        i++;
        obj[k] = value(depth + 1);
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "}") {
          i++;
          return obj;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      if (depth >= MAX_DEPTH) fail("depth limit exceeded");
      i++;
      const arr = [];
      ws();
      if (text[i] === "]") {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "]") {
          i++;
          return arr;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return string();
    if (c === "-" || (c >= "0" && c <= "9")) return number();
    for (const [word, v] of [
      ["true", true],
      ["false", false],
      ["null", null],
    ]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    fail("unexpected character");
  };
  const out = value(0);
  ws();
  if (i !== text.length) fail("trailing characters");
  return out;
}

// -- RFC 8785 canonical JSON and hashes ----------------------------------------------

/** The RFC 8785 text of a value; floats and integers beyond +-2**53 are refused. */
export function canonicalJson(v) {
  if (v === null || v === undefined) return "null";
  if (v === true) return "true";
  if (v === false) return "false";
  if (isStr(v)) return JSON.stringify(v); // RFC 8785 strings are ECMAScript's
  if (typeof v === "number") {
    if (!Number.isInteger(v) || Math.abs(v) > MAX_SAFE) throw new CanonicalJSONError(`number ${v} has no canonical form`);
    return String(v === 0 ? 0 : v);
  }
  if (v instanceof PyNum) {
    throw new CanonicalJSONError(
      v.isFloat ? `float ${v.text} refused: canonical JSON here carries no floats` : `integer ${v.text} is outside +-2**53 and has no exact JSON form`,
    );
  }
  if (isList(v)) return "[" + v.map(canonicalJson).join(",") + "]";
  const keys = Object.keys(v).sort(); // UTF-16 code unit order, as RFC 8785 says
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonicalJson(v[k])).join(",") + "}";
}

const utf8 = (s) => new TextEncoder().encode(s);
const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}
async function sha256Hex(bytes) {
  return toHex(await sha256(bytes));
}
export async function canonicalSha256(v) {
  return sha256Hex(utf8(canonicalJson(v)));
}
function without(obj, fields) {
  const out = Object.create(null);
  for (const k of Object.keys(obj)) if (!fields.includes(k)) out[k] = obj[k];
  return out;
}

const B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/** RFC 4648 base32, upper case, no padding. */
function b32(bytes) {
  let bits = 0;
  let value = 0;
  let out = "";
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += B32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
    value &= (1 << bits) - 1;
  }
  if (bits > 0) out += B32[(value << (5 - bits)) & 31];
  return out;
}
const B64 = /^[A-Za-z0-9+/]*={0,2}$/;
/** base64.b64decode(s, validate=True); Malformed when Python raises. */
function b64decode(s) {
  if (!isStr(s)) throw new Malformed("argument should be a bytes-like object or ASCII string");
  if (!B64.test(s) || s.length % 4 !== 0) throw new Malformed("Non-base64 digit found or incorrect padding");
  const bin = atob(s);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}
function b64encode(bytes) {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}
/** bytes.fromhex: pairs of hex digits, ASCII whitespace allowed between pairs. */
function fromHex(s) {
  if (!isStr(s)) throw new Malformed("fromhex() argument must be str");
  const out = [];
  let i = 0;
  while (i < s.length) {
    if (/[ \t\n\r\f\v]/.test(s[i])) {
      i++;
      continue;
    }
    const pair = s.slice(i, i + 2);
    if (!/^[0-9a-fA-F]{2}$/.test(pair)) throw new Malformed("non-hexadecimal number found in fromhex() arg");
    out.push(parseInt(pair, 16));
    i += 2;
  }
  return new Uint8Array(out);
}
const bytesEqual = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// -- Ed25519 (WebCrypto) ---------------------------------------------------------------

const importedKeys = new Map();
async function ed25519Verify(publicKey, signature, message) {
  const id = toHex(publicKey);
  let key = importedKeys.get(id);
  if (key === undefined) {
    key = crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]).catch(() => null);
    importedKeys.set(id, key);
  }
  const k = await key;
  if (k === null) return false;
  try {
    return await crypto.subtle.verify({ name: "Ed25519" }, k, signature, message);
  } catch {
    return false;
  }
}
/** core/keys.py verify_signature: Ed25519 over the raw bytes of a hex digest. */
async function verifySignature(publicKey, digestHex, signatureB64) {
  let sig;
  let msg;
  try {
    sig = b64decode(signatureB64);
    msg = fromHex(digestHex);
  } catch (e) {
    if (e instanceof Malformed) return false;
    throw e;
  }
  if (sig.length !== 64 || publicKey.length !== 32 || b64encode(sig) !== signatureB64) return false;
  return ed25519Verify(publicKey, sig, msg);
}

// -- keys (core/keys.py) ------------------------------------------------------------------

class PublicKey {
  constructor(keyId, publicKey, fingerprint, rotatesAt = null, certificate = null) {
    this.key_id = keyId;
    this.public_key = publicKey;
    this.fingerprint = fingerprint;
    this.rotates_at = rotatesAt;
    this.certificate = certificate;
  }
  static async of(keyId, publicKey, rotatesAt = null, certificate = null) {
    return new PublicKey(keyId, publicKey, await fingerprintHex(publicKey), rotatesAt, certificate);
  }
  /** PublicKey.from_json: both encodings and both fingerprints agree. */
  static async fromJson(obj) {
    if (!isDict(obj)) throw new Malformed("key document is not an object");
    if (get(obj, "algorithm") !== "ed25519" || get(obj, "format") !== "raw") throw new Malformed("key is not a raw ed25519 key");
    const keyId = get(obj, "key_id");
    if (!isStr(keyId) || !keyId) throw new Malformed("key_id missing");
    const b64 = get(obj, "public_key_b64");
    if (!isStr(b64)) throw new Malformed(`key ${keyId}: field public_key_b64 is missing or not a string`);
    const raw = b64decode(b64);
    if (raw.length !== 32) throw new Malformed(`key ${keyId}: public key is not 32 bytes`);
    if (b64encode(raw) !== b64) throw new Malformed(`key ${keyId}: public_key_b64 is not canonical base64`);
    if (get(obj, "public_key_hex") !== toHex(raw)) throw new Malformed(`key ${keyId}: public_key_hex does not match public_key_b64`);
    const digest = await sha256(raw);
    if (get(obj, "fingerprint_sha256_hex") !== toHex(digest.slice(0, 16))) {
      throw new Malformed(`key ${keyId}: fingerprint_sha256_hex does not match the key`);
    }
    if (get(obj, "fingerprint_sha256_b32_first128bits") !== b32(digest).slice(0, 26)) {
      throw new Malformed(`key ${keyId}: fingerprint_sha256_b32_first128bits does not match`);
    }
    const rotates = get(obj, "rotates_at");
    const cert = get(obj, "certificate");
    if (cert !== null && !isDict(cert)) throw new Malformed(`key ${keyId}: certificate is not an object`);
    return PublicKey.of(keyId, raw, isStr(rotates) ? rotates : null, cert);
  }
}
async function fingerprintHex(publicKey) {
  return toHex((await sha256(publicKey)).slice(0, 16));
}

/** read_key_document: every key a pith-signing-key.json lists; one parser, one error. */
export async function readKeyDocument(doc) {
  const entries = isDict(doc) ? get(doc, "keys", [doc]) : null;
  if (!isList(entries)) throw new Malformed("not a key document");
  const keys = [];
  for (const k of entries) keys.push(await PublicKey.fromJson(k));
  const byId = new Map();
  for (const k of keys) {
    if (byId.has(k.key_id)) throw new Malformed(`key id ${pyRepr(k.key_id)} is listed twice`);
    byId.set(k.key_id, k);
  }
  if (!hasOwn(doc, "keys") || !hasOwn(doc, "key_id")) return keys;
  const head = await PublicKey.fromJson(doc);
  const listed = byId.get(head.key_id);
  if (listed === undefined || !bytesEqual(listed.public_key, head.public_key) || listed.rotates_at !== head.rotates_at) {
    throw new Malformed(`the head key ${pyRepr(head.key_id)} differs from its entry in keys`);
  }
  return keys;
}

// -- certificates (core/certificate.py) ---------------------------------------------------

async function certificateProblem(key, issuers) {
  const cert = key.certificate;
  if (!isDict(cert)) return `key ${key.key_id} has no certificate`;
  if (get(cert, "kind") !== CERTIFICATE_KIND || get(cert, "algorithm") !== "ed25519") return `key ${key.key_id}: not a pith key certificate`;
  if (get(cert, "key_id") !== key.key_id || get(cert, "public_key_hex") !== toHex(key.public_key)) {
    return `key ${key.key_id}: the certificate is for another key`;
  }
  const from = get(cert, "not_before");
  const to = get(cert, "not_after");
  if (!isStr(from) || !isStr(to) || cmpStr(from, to) > 0) return `key ${key.key_id}: the certificate's validity window is malformed`;
  const issuer = issuers.get(pyStr(get(cert, "issuer_key_id")));
  if (issuer === undefined) return `key ${key.key_id}: issuer ${pyRepr(get(cert, "issuer_key_id"))} is not a trusted root key`;
  if (issuer.certificate !== null) return `key ${key.key_id}: issuer ${issuer.key_id} is itself certified (no chains)`;
  if (get(cert, "issuer_fingerprint") !== issuer.fingerprint) return `key ${key.key_id}: issuer fingerprint does not match ${issuer.key_id}`;
  const digest = await canonicalSha256(without(cert, ["certificate_sha256", "signature"]));
  if (get(cert, "certificate_sha256") !== digest) return `key ${key.key_id}: certificate_sha256 does not recompute`;
  const sig = get(cert, "signature");
  if (!isDict(sig) || get(sig, "key_id") !== issuer.key_id || get(sig, "signed_message") !== CERTIFICATE_SIGNED_MESSAGE) {
    return `key ${key.key_id}: certificate signature block malformed`;
  }
  const names = Object.keys(sig);
  if (names.length !== CERTIFICATE_SIGNATURE_FIELDS.length || !names.every((n) => CERTIFICATE_SIGNATURE_FIELDS.includes(n))) {
    return `key ${key.key_id}: certificate signature block has unknown fields or lacks some`;
  }
  if (!(await verifySignature(issuer.public_key, digest, pyStr(get(sig, "signature_b64"))))) {
    return `key ${key.key_id}: certificate signature does not verify with ${issuer.key_id}`;
  }
  return null;
}
const norm = (ts) => (ts.endsWith("Z") && !ts.includes(".") ? ts.slice(0, -1) + ".000000Z" : ts);
function withinWindow(key, signedAt) {
  if (!isStr(signedAt)) return false;
  const t = norm(signedAt);
  const cert = key.certificate;
  if (isDict(cert) && !(cmpStr(norm(pyStr(get(cert, "not_before"))), t) <= 0 && cmpStr(t, norm(pyStr(get(cert, "not_after")))) <= 0)) {
    return false;
  }
  return !(truthy(key.rotates_at) && cmpStr(t, norm(key.rotates_at)) > 0);
}

// -- the merge (core/merge.py) ------------------------------------------------------------

function malformedEvent(ev) {
  const types = {
    event_type: isStr,
    subject_pith_number: isStr,
    target: isStr,
    payload: isDict,
    signer: isDict,
    created_at: isStr,
    supersedes: isList,
    prev_event: (v) => v === null || isStr(v),
    schema_version: isStr,
    content_sha256: isStr,
    event_id: isStr,
    signature: isDict,
  };
  for (const [name, ok] of Object.entries(types)) if (!hasOwn(ev, name) || !ok(ev[name])) return true;
  if (SIGNER_FIELDS.some((f) => !isStr(get(ev.signer, f)))) return true;
  if (EVENT_SIGNATURE_FIELDS.some((f) => !isStr(get(ev.signature, f)))) return true;
  return ev.supersedes.some((s) => !isStr(s));
}
const keyOk = (keys, keyId, fingerprint) => keys.has(keyId) && keys.get(keyId).fingerprint === fingerprint;

/** validate_event: null when the event is valid, else the reason the spec names. */
async function validateEvent(ev, subject, keys) {
  if (!isDict(ev) || malformedEvent(ev)) return "malformed";
  if (!EVENT_TYPES.has(ev.event_type)) return "unknown_event_type";
  let digest;
  try {
    digest = await canonicalSha256(without(ev, UNHASHED_FIELDS));
  } catch (e) {
    if (e instanceof CanonicalJSONError) return "malformed";
    throw e;
  }
  if (digest !== ev.content_sha256) return "bad_content_hash";
  if (ev.event_id !== "sha256:" + digest) return "bad_event_id";
  if (ev.subject_pith_number !== subject) return "subject_mismatch";
  const signer = ev.signer;
  const sig = ev.signature;
  if (!keyOk(keys, signer.key_id, signer.public_key_fingerprint)) return "unknown_key";
  if (!keyOk(keys, sig.key_id, sig.public_key_fingerprint)) return "unknown_key";
  if (sig.algorithm !== "ed25519" || sig.signed_message !== EVENT_SIGNED_MESSAGE || sig.signature_status !== SIGNATURE_STATUS) {
    return "bad_signature";
  }
  if (!(await verifySignature(keys.get(sig.key_id).public_key, digest, sig.signature_b64))) return "bad_signature";
  return null;
}

const stateEntry = (e) => ({ event_id: e.event_id, target: e.target, created_at: e.created_at, signer: e.signer, payload: e.payload });
function cmpOrder(a, b) {
  return (
    cmpStr(a.created_at, b.created_at) ||
    (a.event_type === "record_created" ? 0 : 1) - (b.event_type === "record_created" ? 0 : 1) ||
    cmpStr(a.event_id, b.event_id)
  );
}

/** merge(): the state of `subject` from its events, aliases and keys (spec section 7). */
async function merge(events, aliases, keys, subject, validate) {
  const valid = new Map();
  const invalid = new Map();
  const anonymous = [];
  for (const ev of events) {
    const eid = isDict(ev) && isStr(get(ev, "event_id")) ? ev.event_id : null;
    if (eid !== null && valid.has(eid)) continue;
    const reason = await validate(ev);
    if (eid === null) {
      anonymous.push(reason || "malformed");
      continue;
    }
    if (reason === null) {
      valid.set(eid, ev);
      invalid.delete(eid);
    } else if (!invalid.has(eid)) invalid.set(eid, reason);
  }
  const ordered = [...valid.values()].sort(cmpOrder);
  const creations = ordered.filter((e) => e.event_type === "record_created");
  const applied0 = creations.length ? creations[0] : null;
  const equivocations = [];
  if (creations.length > 1) {
    equivocations.push({ kind: "conflicting_record", event_ids: creations.map((e) => e.event_id).sort(cmpStr) });
  }
  const forks = new Map();
  for (const e of ordered) {
    if (e.prev_event !== null) {
      const k = JSON.stringify([e.signer.signer_id, e.prev_event]);
      if (!forks.has(k)) forks.set(k, [e.signer.signer_id, e.prev_event, []]);
      forks.get(k)[2].push(e.event_id);
    }
  }
  const forkList = [...forks.values()].sort((a, b) => cmpStr(a[0], b[0]) || cmpStr(a[1], b[1]));
  for (const [, , ids] of forkList) if (ids.length > 1) equivocations.push({ kind: "fork", event_ids: [...ids].sort(cmpStr) });
  const applied = ordered.filter((e) => e.event_type !== "record_created" || e === applied0);
  const superseded = new Set(applied.flatMap((e) => e.supersedes));
  const current = {
    canonical_record: applied0 ? get(applied0.payload, "canonical_record") : null,
    source_aliases: aliases.map(pyDict),
  };
  for (const name of CURRENT_LISTS) current[name] = [];
  for (const e of applied) {
    const list = EVENT_TYPES.get(e.event_type)[1];
    if (list !== null && !superseded.has(e.event_id)) current[list].push(stateEntry(e));
  }
  current.record_created = applied0 && !superseded.has(applied0.event_id) ? stateEntry(applied0) : null;
  const invalidList = [...invalid.entries()]
    .sort((a, b) => cmpStr(a[0], b[0]))
    .map(([eid, r]) => ({ event_id: eid, reason: r }));
  for (const r of [...anonymous].sort(cmpStr)) invalidList.push({ event_id: null, reason: r });
  const state = {
    state_type: "pith_open_graph_state",
    state_version: "1.0",
    pith_number: subject,
    merge_version: MERGE_VERSION,
    event_count: valid.size + invalid.size + anonymous.length,
    valid_event_count: valid.size,
    invalid_event_count: invalid.size + anonymous.length,
    equivocation_count: equivocations.length,
    current,
    equivocations,
    invalid_events: invalidList,
    applied_event_ids: applied.map((e) => e.event_id),
  };
  state.state_sha256 = await canonicalSha256(state);
  return state;
}

// -- the Pith number (core/pith_record.py) -------------------------------------------------

/** Python's int() of a short text: blanks around, a sign, digits of any script, `_` between digits. */
function pyInt(text) {
  const s = text.replace(new RegExp("^" + PY_SPACE + "+|" + PY_SPACE + "+$", "gu"), "");
  const m = /^([+-]?)(\p{Nd}(?:_?\p{Nd})*)$/u.exec(s);
  if (!m) throw new Malformed(`invalid literal for int() with base 10: ${pyRepr(text)}`);
  let n = 0;
  for (const ch of m[2]) {
    if (ch === "_") continue;
    let cp = ch.codePointAt(0);
    let d = 0;
    while (/\p{Nd}/u.test(String.fromCodePoint(cp - 1)) && d < 100) {
      cp -= 1;
      d += 1;
    }
    n = n * 10 + (d % 10);
  }
  return m[1] === "-" ? -n : n;
}
const PITH_NUMBER = /^pith:([0-9]{4}):([A-Z2-7]{26})$/;
function parsePithNumber(text) {
  const m = isStr(text) ? PITH_NUMBER.exec(text) : null;
  if (!m) throw new Malformed(`not a Pith number: ${pyRepr(text)}`);
  return { year: Number(m[1]), body: m[2], short: `pith:${m[2].slice(0, 8)}` };
}
const formatYear = (y) => (y < 0 ? "-" + String(-y).padStart(3, "0") : String(y).padStart(4, "0"));

// -- text (core/text.py) -----------------------------------------------------------------

export function canonText(text) {
  return text
    .normalize("NFC")
    .toLowerCase()
    .split(PY_SPACES)
    .filter((w) => w !== "")
    .join(" ");
}

// -- the verifier (core/verify.py) ---------------------------------------------------------

function obj(v, what) {
  if (!isDict(v)) throw new Bad(`${what} is not an object`);
  return v;
}
function list(v, what) {
  if (!isList(v)) throw new Bad(`${what} is not a list`);
  return v;
}
function str(v, what) {
  if (!isStr(v)) throw new Bad(`${what} is not a string`);
  return v;
}
function blockProblem(block, fields, what) {
  if (!isDict(block)) return `${what} is not an object`;
  const names = Object.keys(block);
  const extra = names.filter((k) => !fields.includes(k)).sort(cmpStr);
  const missing = fields.filter((f) => !hasOwn(block, f)).sort(cmpStr);
  const notStr = fields.filter((k) => hasOwn(block, k) && !isStr(block[k])).sort(cmpStr);
  const parts = [];
  if (extra.length) parts.push("unknown fields " + extra.join(", "));
  if (missing.length) parts.push("missing fields " + missing.join(", "));
  if (notStr.length) parts.push("non-string " + notStr.join(", "));
  return parts.length ? `${what}: ` + parts.join("; ") : null;
}
function exact(block, fields, what) {
  const why = blockProblem(block, fields, what);
  if (why) throw new Bad(why);
  return block;
}

class Verifier {
  constructor(bundle, pinned, trusted) {
    this.b = bundle;
    this.pinned = pinned ? pinned.toLowerCase() : null;
    this.trusted = trusted; // Map key_id -> PublicKey, or null
    this.keys = new Map();
    this.keyErrors = [];
    this.pinFailures = [];
    this.state = null;
    const subject = get(bundle, "pith_number");
    this.subject = isStr(subject) ? subject : "";
    this.reasons = new Map(); // event -> Promise of validate_event's reason
  }

  async init() {
    let listed = get(this.b, "public_keys");
    listed = truthy(listed) ? listed : [];
    if (!isList(listed)) {
      this.keyErrors.push("public_keys is not a list");
      listed = [];
    }
    for (const [i, doc] of listed.entries()) {
      try {
        const k = await PublicKey.fromJson(doc);
        if (!this.keys.has(k.key_id)) this.keys.set(k.key_id, k);
      } catch (e) {
        if (!(e instanceof Malformed || e instanceof Bad || e instanceof CanonicalJSONError)) throw e;
        this.keyErrors.push(`public_keys[${i}]: ${e.message}`);
      }
    }
  }

  validate(ev) {
    if (!this.reasons.has(ev)) this.reasons.set(ev, validateEvent(ev, this.subject, this.keys));
    return this.reasons.get(ev);
  }

  async merged() {
    if (this.state === null) {
      const events = list(get(this.b, "events"), "events");
      const aliases = list(get(this.b, "source_aliases"), "source_aliases");
      this.state = await merge(events, aliases, this.keys, this.subject, (ev) => this.validate(ev));
    }
    return this.state;
  }

  async canonical_hash() {
    const rec = obj(get(this.b, "canonical_record"), "canonical_record");
    const want = str(get(this.b, "canonical_sha256"), "canonical_sha256");
    const got = await canonicalSha256(rec);
    if (got !== want) throw new Bad(`canonical_sha256 ${want.slice(0, 16)}... but the record hashes to ${got.slice(0, 16)}...`);
    return `canonical_sha256 ${got}`;
  }

  async pith_number() {
    const rec = obj(get(this.b, "canonical_record"), "canonical_record");
    const meta = obj(get(rec, "metadata"), "canonical_record.metadata");
    const sub = str(get(meta, "submitted_at"), "submitted_at");
    const digest = await canonicalSha256(rec);
    const year = pyInt(Array.from(sub).slice(0, 4).join(""));
    const body = b32(fromHex(digest).slice(0, 20)).slice(0, 26);
    const want = `pith:${formatYear(year)}:${body}`;
    if (get(this.b, "pith_number") !== want) throw new Bad(`pith_number ${pyRepr(get(this.b, "pith_number"))}, expected ${want}`);
    if (get(this.b, "short_pith_number") !== parsePithNumber(want).short) {
      throw new Bad(`short_pith_number ${pyRepr(get(this.b, "short_pith_number"))} does not match`);
    }
    const src = obj(get(this.b, "source"), "source");
    if (canonicalJson(src) !== canonicalJson(obj(get(rec, "source"), "canonical_record.source"))) {
      throw new Bad("source differs from canonical_record.source");
    }
    return want;
  }

  async source_aliases() {
    const aliases = list(get(this.b, "source_aliases"), "source_aliases");
    const body = parsePithNumber(str(get(this.b, "pith_number"), "pith_number")).body;
    const src = obj(get(this.b, "source"), "source");
    const strict = { pith_short_8: body.slice(0, 8), pith_short_12: body.slice(0, 12), pith_short_16: body.slice(0, 16) };
    let loose = {};
    if (get(src, "kind") === "arxiv") {
      const id = pyStr(get(src, "id"));
      loose = { arxiv: id, arxiv_version: `${id}v${pyStr(get(src, "version"))}`, doi: `10.48550/arxiv.${id}` };
    }
    const notes = [];
    for (let a of aliases) {
      a = obj(a, "alias");
      const kind = str(get(a, "alias_kind"), "alias_kind");
      const value = str(get(a, "alias_value"), "alias_value");
      str(get(a, "created_at"), "alias created_at");
      if (hasOwn(strict, kind) && value !== strict[kind]) throw new Bad(`alias ${kind}=${pyRepr(value)} is not a prefix of ${body}`);
      if (hasOwn(loose, kind) && value.toLowerCase() !== loose[kind].toLowerCase()) {
        notes.push(`${kind}=${pyRepr(value)} (record suggests ${pyRepr(loose[kind])})`);
      }
    }
    if (notes.length) return [WARN, "unexpected source aliases: " + notes.join("; ")];
    return `${aliases.length} aliases consistent`;
  }

  async public_keys() {
    if (this.keyErrors.length) throw new Bad(this.keyErrors.join("; "));
    if (!this.keys.size) throw new Bad("no public keys listed");
    return [...this.keys.values()].map((k) => `${k.key_id} (${k.fingerprint})`).join(", ");
  }

  key(keyId, fingerprint, what) {
    const key = isStr(keyId) ? this.keys.get(keyId) : undefined;
    if (key === undefined) throw new Bad(`${what}: key ${pyRepr(keyId)} is not listed in public_keys`);
    if (key.fingerprint !== fingerprint) throw new Bad(`${what}: fingerprint ${pyRepr(fingerprint)} does not match key ${keyId}`);
    return key;
  }

  async appliedCreation() {
    const state = await this.merged();
    const rc = obj(state.current.record_created, "state: no applied record_created");
    for (const ev of list(get(this.b, "events"), "events")) {
      if (isDict(ev) && pyEq(get(ev, "event_id"), rc.event_id)) return ev;
    }
    throw new Bad("applied record_created not found among events");
  }

  static receiptKindOk(r) {
    return (
      get(r, "kind") === "pith_receipt" &&
      get(r, "algorithm") === "ed25519" &&
      get(r, "signed_message") === RECEIPT_SIGNED_MESSAGE &&
      get(r, "signature_status") === SIGNATURE_STATUS
    );
  }

  async receipt() {
    const ev = await this.appliedCreation();
    const payload = obj(get(ev, "payload"), "record_created.payload");
    const rec = obj(get(payload, "canonical_record"), "payload.canonical_record");
    if (canonicalJson(rec) !== canonicalJson(obj(get(this.b, "canonical_record"), "canonical_record"))) {
      throw new Bad("record_created carries a different canonical record than the bundle");
    }
    const r = exact(get(payload, "receipt"), RECEIPT_FIELDS, "receipt");
    const digest = str(get(r, "canonical_sha256"), "receipt.canonical_sha256");
    if (digest !== get(this.b, "canonical_sha256") || get(payload, "canonical_sha256") !== digest) {
      throw new Bad("receipt is for a different canonical_sha256");
    }
    if (!Verifier.receiptKindOk(r)) throw new Bad("receipt kind, algorithm, signed_message or signature_status unexpected");
    const key = this.key(get(r, "key_id"), get(r, "public_key_fingerprint"), "receipt");
    if (!(await verifySignature(key.public_key, digest, str(get(r, "signature_b64"), "receipt.signature_b64")))) {
      throw new Bad(`receipt signature does not verify with key ${key.key_id}`);
    }
    const reissues = await this.reissuedReceipts(ev, r);
    if (reissues.length) {
      const [latestKey, latest] = reissues[reissues.length - 1];
      await this.pinUse("receipt (re-issued)", latestKey);
      return `signed by ${key.key_id}; re-issued by ${latestKey.key_id} at ${pyStr(get(latest, "last_reissued_at"))}`;
    }
    await this.pinUse("receipt", key);
    return `signed by ${key.key_id}`;
  }

  async reissuedReceipts(creation, original) {
    const out = [];
    for (const entry of (await this.merged()).current.corrections) {
      const payload = isDict(entry) ? get(entry, "payload") : null;
      if (!isDict(payload) || get(payload, "kind") !== RECEIPT_REISSUED) continue;
      if (!pyEq(get(payload, "record_created"), get(creation, "event_id"))) {
        throw new Bad(`re-issued receipt ${pyStr(get(entry, "event_id"))} names another record_created event`);
      }
      const r = exact(get(payload, "receipt"), RECEIPT_FIELDS, "re-issued receipt");
      if (!Verifier.receiptKindOk(r)) throw new Bad("re-issued receipt kind, algorithm, signed_message or signature_status unexpected");
      if (!pyEq(get(r, "canonical_sha256"), get(original, "canonical_sha256"))) throw new Bad("re-issued receipt is for a different canonical_sha256");
      if (!pyEq(get(r, "first_computed_at"), get(original, "first_computed_at"))) throw new Bad("re-issued receipt changes first_computed_at");
      const key = this.key(get(r, "key_id"), get(r, "public_key_fingerprint"), "re-issued receipt");
      if (!(await verifySignature(key.public_key, str(get(r, "canonical_sha256"), "digest"), str(get(r, "signature_b64"), "signature_b64")))) {
        throw new Bad(`re-issued receipt signature does not verify with key ${key.key_id}`);
      }
      out.push([key, r]);
    }
    return out
      .map((kr, i) => [pyStr(get(kr[1], "last_reissued_at")), i, kr])
      .sort((a, b) => cmpStr(a[0], b[0]) || a[1] - b[1])
      .map((x) => x[2]);
  }

  async eventCheck(wanted, label) {
    const events = list(get(this.b, "events"), "events");
    const claimed = new Set();
    for (const e of pyIter(dget(truthy(get(this.b, "state")) ? get(this.b, "state") : {}, "invalid_events", []))) {
      if (isDict(e)) claimed.add(JSON.stringify([hashable(get(e, "event_id")), hashable(get(e, "reason"))]));
    }
    const fails = [];
    const warns = [];
    const merged = await this.merged();
    const validIds = new Set([...merged.applied_event_ids, ...merged.equivocations.flatMap((eq) => eq.event_ids)]);
    for (const [i, ev] of events.entries()) {
      const reason = await this.validate(ev);
      const eid = isDict(ev) ? get(ev, "event_id") : null;
      if (reason === null || !wanted.includes(reason)) continue;
      if (validIds.has(hashable(eid))) continue; // another copy of this id verified (a re-signed event)
      const msg = `events[${i}] ${pyStr(eid)}: ${reason}`;
      (claimed.has(JSON.stringify([eid, reason])) ? warns : fails).push(msg);
    }
    if (fails.length) return [FAIL, fails.join("; ")];
    if (warns.length) return [WARN, "invalid events accounted for in the state: " + warns.join("; ")];
    return [OK, `${events.length} events: ${label}`];
  }

  async event_hashes() {
    return this.eventCheck(["malformed", "bad_content_hash", "unknown_event_type"], "hashes recompute");
  }

  async event_ids() {
    return this.eventCheck(["bad_event_id", "subject_mismatch"], "ids match content hashes");
  }

  async event_signatures() {
    const [status, detail] = await this.eventCheck(["bad_signature", "unknown_key"], "signatures verify");
    const blocks = [];
    for (const [i, ev] of list(get(this.b, "events"), "events").entries()) {
      if (isDict(ev) && isDict(get(ev, "signature"))) {
        const why = blockProblem(ev.signature, EVENT_SIGNATURE_FIELDS, `events[${i}].signature`);
        if (why) blocks.push(why);
      }
    }
    if (blocks.length) return [FAIL, [...blocks, ...(status === FAIL ? [detail] : [])].join("; ")];
    return [status, detail];
  }

  async bundleSha256() {
    return canonicalSha256(without(this.b, ["bundle_signature"]));
  }

  async bundle_hash() {
    const sig = obj(get(this.b, "bundle_signature"), "bundle_signature");
    const got = await this.bundleSha256();
    if (get(sig, "bundle_sha256") !== got) {
      throw new Bad(`bundle_sha256 ${pyStr(get(sig, "bundle_sha256")).slice(0, 16)}... but the bundle hashes to ${got.slice(0, 16)}...`);
    }
    return got;
  }

  async bundle_signature() {
    const sig = exact(get(this.b, "bundle_signature"), BUNDLE_SIGNATURE_FIELDS, "bundle_signature");
    if (get(sig, "algorithm") !== "ed25519" || get(sig, "signed_message") !== BUNDLE_SIGNED_MESSAGE || get(sig, "signature_status") !== SIGNATURE_STATUS) {
      throw new Bad("algorithm, signed_message or signature_status unexpected");
    }
    const key = this.key(get(sig, "key_id"), get(sig, "public_key_fingerprint"), "bundle_signature");
    const digest = await this.bundleSha256();
    if (!(await verifySignature(key.public_key, digest, str(get(sig, "signature_b64"), "signature_b64")))) {
      throw new Bad(`signature does not verify with key ${key.key_id}`);
    }
    await this.pinUse("bundle_signature", key);
    return `signed by ${key.key_id}`;
  }

  async state_check() {
    const given = obj(get(this.b, "state"), "state");
    const merged = await this.merged();
    if (canonicalJson(given) !== canonicalJson(merged)) {
      const names = [...new Set([...Object.keys(given), ...Object.keys(merged)])];
      const diff = names.filter((k) => canonicalJson(get(given, k)) !== canonicalJson(get(merged, k))).sort(cmpStr);
      throw new Bad(`state does not recompute from events and aliases (differs in: ${diff.join(", ")})`);
    }
    if (merged.equivocations.length) {
      const eqs = merged.equivocations.map((e) => `${e.kind} ${e.event_ids.join(", ")}`).join("; ");
      return [WARN, `state_sha256 ${merged.state_sha256}; equivocations listed in the state: ${eqs}`];
    }
    return `state_sha256 ${merged.state_sha256}`;
  }

  claimedInvalid(ev) {
    const state = truthy(get(this.b, "state")) ? get(this.b, "state") : {};
    return pyIter(dget(state, "invalid_events", [])).some((e) => isDict(e) && pyEq(get(e, "event_id"), get(ev, "event_id")));
  }

  async keys_listed() {
    const used = new Set();
    for (const [i, ev] of list(get(this.b, "events"), "events").entries()) {
      if (!isDict(ev)) continue;
      for (const part of ["signer", "signature"]) {
        const blk = get(ev, part);
        if (isDict(blk) && isStr(get(blk, "key_id"))) {
          if (!this.keys.has(blk.key_id) && !this.claimedInvalid(ev)) throw new Bad(`events[${i}].${part}: key ${pyRepr(blk.key_id)} not listed`);
          used.add(blk.key_id);
        }
      }
    }
    const sig = obj(get(this.b, "bundle_signature"), "bundle_signature");
    if (!this.keys.has(hashable(get(sig, "key_id")))) throw new Bad(`bundle_signature: key ${pyRepr(get(sig, "key_id"))} not listed`);
    used.add(pyStr(get(sig, "key_id")));
    return "keys used: " + [...used].sort(cmpStr).join(", ");
  }

  async pinUse(what, key) {
    if (this.pinned && !(await this.pinOk(key))) this.pinFailures.push(`${what} uses ${key.key_id} (${key.fingerprint})`);
  }

  /** The pinned key itself, or a key it certified (a short-lived backfill key). */
  async pinOk(key) {
    if (key === undefined || key === null) return false;
    if (key.fingerprint === this.pinned) return true;
    const cert = key.certificate;
    if (cert === null || get(cert, "issuer_fingerprint") !== this.pinned) return false;
    const issuer = this.keys.get(pyStr(get(cert, "issuer_key_id")));
    return issuer !== undefined && (await certificateProblem(key, new Map([[issuer.key_id, issuer]]))) === null;
  }

  async pinned_key() {
    if (!this.pinned) return [SKIP, "no pinned fingerprint (add #pin=<fingerprint> to the address)"];
    const fails = [...this.pinFailures];
    let events = get(this.b, "events");
    events = truthy(events) ? events : [];
    for (const [i, ev] of pyIter(events).entries()) {
      if (!isDict(ev) || !isDict(get(ev, "signer"))) continue;
      if (get(ev.signer, "signer_type") === "pith_registry") {
        const applied = new Set((await this.merged()).applied_event_ids);
        if (!applied.has(hashable(get(ev, "event_id")))) continue;
        let sig = get(ev, "signature");
        sig = truthy(sig) ? sig : {};
        if (dget(sig, "public_key_fingerprint") !== this.pinned && !(await this.pinOk(this.keys.get(pyStr(get(sig, "key_id")))))) {
          fails.push(`events[${i}] signed with ${pyStr(get(sig, "public_key_fingerprint"))}`);
        }
      }
    }
    if (fails.length) return [FAIL, "not the pinned key: " + fails.join("; ")];
    return [OK, `registry signatures use ${this.pinned}`];
  }

  async signatures() {
    const out = [];
    const merged = await this.merged();
    const validIds = new Set([...merged.applied_event_ids, ...merged.equivocations.flatMap((eq) => eq.event_ids)]);
    for (const [i, ev] of list(get(this.b, "events"), "events").entries()) {
      if (isDict(ev) && validIds.has(hashable(get(ev, "event_id"))) && isDict(get(ev, "signature"))) {
        out.push([`events[${i}]`, get(ev.signature, "key_id"), get(ev.signature, "signed_at")]);
        const payload = get(ev, "payload");
        if (get(ev, "event_type") === "record_created" && isDict(payload) && isDict(get(payload, "receipt"))) {
          out.push([`events[${i}] receipt`, get(payload.receipt, "key_id"), get(payload.receipt, "signed_at")]);
        }
        if (isDict(payload) && get(payload, "kind") === RECEIPT_REISSUED && isDict(get(payload, "receipt"))) {
          out.push([`events[${i}] re-issued receipt`, get(payload.receipt, "key_id"), get(payload.receipt, "signed_at")]);
        }
      }
    }
    const sig = obj(get(this.b, "bundle_signature"), "bundle_signature");
    out.push(["bundle_signature", get(sig, "key_id"), get(this.b, "built_at")]);
    return out;
  }

  async key_trust() {
    const rootsFrom = this.trusted !== null && this.trusted.size ? this.trusted : this.keys;
    const roots = new Map([...rootsFrom.values()].filter((k) => k.certificate === null).map((k) => [k.key_id, k]));
    const problems = [];
    const certified = [...this.keys.values()].filter((k) => k.certificate !== null);
    for (const k of certified) {
      const why = await certificateProblem(k, roots);
      if (why) problems.push(why);
    }
    const used = new Set();
    for (const [what, kid, signedAt] of await this.signatures()) {
      let key = isStr(kid) ? this.keys.get(kid) : undefined;
      if (key === undefined) continue; // keys_listed reports it
      used.add(key.key_id);
      const known = this.trusted !== null ? this.trusted.get(key.key_id) : undefined;
      if (known !== undefined && bytesEqual(known.public_key, key.public_key)) {
        key = new PublicKey(key.key_id, key.public_key, key.fingerprint, known.rotates_at, key.certificate);
      }
      if (!withinWindow(key, signedAt)) problems.push(`${what}: signed at ${pyStr(signedAt)}, outside the validity of key ${key.key_id}`);
    }
    if (this.trusted !== null) {
      for (const kid of [...used].sort(cmpStr)) {
        const key = this.keys.get(kid);
        const known = this.trusted.get(kid);
        if (known !== undefined && bytesEqual(known.public_key, key.public_key) && known.certificate === null) continue;
        if (key.certificate !== null && (await certificateProblem(key, roots)) === null) continue;
        problems.push(`key ${kid} is neither in the trusted key document nor certified by a key in it`);
      }
    }
    if (problems.length) throw new Bad(problems.join("; "));
    const parts = [certified.length ? `${certified.length} certified key(s) valid` : "no certified keys", "signatures inside their keys' validity"];
    if (this.trusted !== null) parts.push("every key trusted");
    return parts.join(", ");
  }

  /** The title and abstract the record's graph snapshots show hash to the record's. */
  async text_hashes() {
    let state;
    try {
      state = await this.merged();
    } catch {
      return [SKIP, "the state does not recompute, so no snapshot is known to be the record's"];
    }
    const rec = get(this.b, "canonical_record");
    const meta = isDict(rec) ? get(rec, "metadata") : null;
    if (!isDict(meta)) return [SKIP, "the record has no metadata to compare with"];
    const want = { title: get(meta, "title_canon_sha256"), abstract: get(meta, "abstract_canon_sha256") };
    const checked = [];
    const notes = [];
    for (const entry of state.current.graph_snapshots) {
      const snapshot = isDict(entry.payload) ? get(entry.payload, "graph_snapshot") : null;
      const paper = isDict(snapshot) ? get(snapshot, "paper") : null;
      if (!isDict(paper)) continue;
      const title = get(paper, "title");
      if (isStr(title) && isStr(want.title)) {
        if ((await sha256Hex(utf8(canonText(title)))) !== want.title) {
          throw new Bad(`the title shown (${pyRepr(title.slice(0, 60))}) does not hash to the record's title_canon_sha256`);
        }
        checked.push("title");
      }
      const excerpt = get(paper, "abstract_excerpt");
      if (isStr(excerpt) && isStr(want.abstract)) {
        const same = (await sha256Hex(utf8(canonText(excerpt)))) === want.abstract;
        if (same) checked.push("abstract");
        else if (cpLength(excerpt) < EXCERPT_CHARS) throw new Bad("the abstract shown does not hash to the record's abstract_canon_sha256");
        else notes.push(`the abstract is shown cut at ${EXCERPT_CHARS} characters, so only the record's hash vouches for it`);
      }
    }
    if (!checked.length) return [SKIP, notes.join("; ") || "no title or abstract text in the bundle"];
    const what = [...new Set(checked)].join(" and ");
    return [OK, `the ${what} shown hash to the record's` + (notes.length ? "; " + notes.join("; ") : "")];
  }
}

/** verify_bundle: every check by name, in the command's order. */
export async function verifyBundle(bundle, { pinned = null, trusted = null } = {}) {
  if (!isDict(bundle)) return [{ name: "bundle", status: FAIL, detail: "not a JSON object" }];
  const v = new Verifier(bundle, pinned, trusted);
  await v.init();
  const checks = [];
  const run = async (name, fn) => {
    let status;
    let detail;
    try {
      const out = await fn();
      [status, detail] = isList(out) ? out : [OK, out];
    } catch (e) {
      status = FAIL;
      detail = e instanceof Bad ? e.message : `malformed bundle (${e.name}: ${String(e.message).slice(0, 200)})`;
    }
    checks.push({ name, status, detail });
  };
  await run("canonical_hash", () => v.canonical_hash());
  await run("pith_number", () => v.pith_number());
  await run("source_aliases", () => v.source_aliases());
  await run("public_keys", () => v.public_keys());
  await run("receipt", () => v.receipt());
  await run("event_hashes", () => v.event_hashes());
  await run("event_ids", () => v.event_ids());
  await run("event_signatures", () => v.event_signatures());
  await run("bundle_hash", () => v.bundle_hash());
  await run("bundle_signature", () => v.bundle_signature());
  await run("state", () => v.state_check());
  await run("keys_listed", () => v.keys_listed());
  await run("pinned_key", () => v.pinned_key());
  await run("key_trust", () => v.key_trust());
  await run("text_hashes", () => v.text_hashes());
  return checks;
}

// -- the transparency log (pith_pipeline/tlog) -------------------------------------------------

const TILE_HEIGHT = 8;
const TILE_WIDTH = 256;
const HASH_SIZE = 32;
const NOTE_DASH = "\u2014 ";
const EVENT_OBJECT = /^events\/([A-Z2-7]{26})\/([0-9a-f]{64})(?:\.sig-([A-Za-z0-9._-]+))?\.json$/;
const COMMITTED = /^pith-log-entry\/sha256\/v1\nevent_id sha256:([0-9a-f]{64})\nevent_key (events\/[A-Z2-7]{26}\/[0-9a-f]{64}\.json)\nsize (0|[1-9][0-9]{0,18})\nsha256 ([0-9a-f]{64})\n$/;

class LogError extends Error {}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
const leafHash = (entry) => sha256(concat(new Uint8Array([0]), entry));
const nodeHash = (l, r) => sha256(concat(new Uint8Array([1]), l, r));
function splitPoint(n) {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}
async function rootOf(hashes) {
  let level = hashes;
  while (level.length > 1) {
    const next = [];
    for (let i = 0; i + 1 < level.length; i += 2) next.push(await nodeHash(level[i], level[i + 1]));
    if (level.length % 2) next.push(level[level.length - 1]);
    level = next;
  }
  return level[0];
}
function encodeIndex(n) {
  const parts = [String(n % 1000).padStart(3, "0")];
  n = Math.floor(n / 1000);
  while (n) {
    parts.push("x" + String(n % 1000).padStart(3, "0"));
    n = Math.floor(n / 1000);
  }
  return parts.reverse().join("/");
}
const suffix = (width) => (width === TILE_WIDTH ? "" : `.p/${width}`);
const tilePath = (level, index, width) => `tile/${level}/${encodeIndex(index)}${suffix(width)}`;
const entriesPath = (index, width) => `tile/entries/${encodeIndex(index)}${suffix(width)}`;
function tileWidth(level, index, size) {
  const hashes = Math.floor(size / 256 ** level);
  return Math.max(0, Math.min(TILE_WIDTH, hashes - index * TILE_WIDTH));
}

/** TileReader: hashes and entries of one tree size, each tile read once; `reads` counts. */
class TileReader {
  constructor(fetchLog, size) {
    this.fetch = fetchLog;
    this.size = size;
    this.reads = 0;
    this.tiles = new Map();
  }
  async get(path) {
    const data = await this.fetch(path);
    this.reads += 1;
    if (data === null) throw new LogError(`log/${path} is missing (the checkpoint's tree needs it)`);
    return data;
  }
  async tile(level, index) {
    const k = `${level}/${index}`;
    if (!this.tiles.has(k)) {
      const width = tileWidth(level, index, this.size);
      if (width === 0) throw new LogError(`tile ${level}/${index} is outside a tree of size ${this.size}`);
      const path = tilePath(level, index, width);
      const data = await this.get(path);
      if (data.length !== width * HASH_SIZE) throw new LogError(`log/${path} has ${data.length} bytes, expected ${width * HASH_SIZE}`);
      const hashes = [];
      for (let i = 0; i < data.length; i += HASH_SIZE) hashes.push(data.slice(i, i + HASH_SIZE));
      this.tiles.set(k, hashes);
    }
    return this.tiles.get(k);
  }
  async hashes(level, start, end) {
    const out = [];
    let i = start;
    while (i < end) {
      const t = await this.tile(level, Math.floor(i / TILE_WIDTH));
      const lo = i % TILE_WIDTH;
      const take = Math.min(end - i, t.length - lo);
      if (take <= 0) throw new LogError(`tile ${level}/${Math.floor(i / TILE_WIDTH)} is shorter than the tree needs`);
      out.push(...t.slice(lo, lo + take));
      i += take;
    }
    return out;
  }
  /** MTH(D[lo:hi]) from the fewest tile hashes (tlog/log.py TileReader.mth). */
  async mth(lo, hi) {
    const n = hi - lo;
    if (n <= 0 || hi > this.size) throw new LogError(`no subtree [${lo}, ${hi}) in a tree of size ${this.size}`);
    let bits = 0;
    let p = 1;
    while (p * 2 <= n) {
      p *= 2;
      bits += 1;
    }
    if (p === n && lo % n === 0) {
      const level = Math.floor(bits / TILE_HEIGHT);
      const unit = 256 ** level;
      return rootOf(await this.hashes(level, lo / unit, hi / unit));
    }
    const k = splitPoint(n);
    return nodeHash(await this.mth(lo, lo + k), await this.mth(lo + k, hi));
  }
  async entries(index) {
    const width = tileWidth(0, index, this.size);
    const path = entriesPath(index, width);
    const data = await this.get(path);
    const out = [];
    let pos = 0;
    while (pos < data.length) {
      if (pos + 2 > data.length) throw new LogError(`log/${path} ends inside a length prefix`);
      const n = (data[pos] << 8) | data[pos + 1];
      if (pos + 2 + n > data.length) throw new LogError(`log/${path} ends inside entry ${out.length}`);
      out.push(data.slice(pos + 2, pos + 2 + n));
      pos += 2 + n;
    }
    if (out.length !== width) throw new LogError(`log/${path} holds ${out.length} entries, expected ${width}`);
    return out;
  }
  /** PATH(index, D[0:size]) of RFC 9162 section 2.1.3.1. */
  async inclusionProof(index) {
    const out = [];
    let lo = 0;
    let hi = this.size;
    let m = index;
    while (hi - lo > 1) {
      const k = splitPoint(hi - lo);
      if (m < k) {
        out.push(await this.mth(lo + k, hi));
        hi = lo + k;
      } else {
        out.push(await this.mth(lo, lo + k));
        lo += k;
        m -= k;
      }
    }
    return out.reverse();
  }
}

/** RFC 9162 section 2.1.3.2: the root an inclusion proof leads to, or null. */
async function rootFromInclusion(index, size, leaf, proof) {
  if (!(index >= 0 && index < size) || leaf.length !== HASH_SIZE) return null;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  const odd = (x) => x % 2 === 1;
  for (const p of proof) {
    if (sn === 0 || p.length !== HASH_SIZE) return null;
    if (odd(fn) || fn === sn) {
      r = await nodeHash(p, r);
      if (!odd(fn)) {
        while (!odd(fn) && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 ? r : null;
}

function isNoteNameOk(name) {
  return name !== "" && !PY_SPACE_ONE.test(name) && !name.includes("+");
}
async function noteKeyId(name, publicKey) {
  const d = await sha256(concat(utf8(name), new Uint8Array([0x0a, 0x01]), publicKey));
  return ((d[0] << 24) >>> 0) + (d[1] << 16) + (d[2] << 8) + d[3];
}
/** tlog/note.py Verifier.parse: `name+hexid+base64(0x01 || key)`, the id checked. */
async function parseVkey(vkey) {
  const parts = vkey.replace(new RegExp("^" + PY_SPACE + "+|" + PY_SPACE + "+$", "gu"), "").split("+");
  if (parts.length < 3) throw new LogError("not a note verifier key (name+hexid+base64)");
  const [name, hexId] = parts;
  const b64 = parts.slice(2).join("+");
  let raw;
  try {
    raw = b64decode(b64);
  } catch {
    throw new LogError("not a note verifier key (name+hexid+base64)");
  }
  if (!/^[0-9a-fA-F]{8}$/.test(hexId) || raw.length !== 33 || raw[0] !== 1) throw new LogError("not an Ed25519 note verifier key");
  if (!isNoteNameOk(name)) throw new LogError(`note key name ${pyRepr(name)} is empty or has a space or '+'`);
  const publicKey = raw.slice(1);
  const keyId = parseInt(hexId, 16);
  if ((await noteKeyId(name, publicKey)) !== keyId) throw new LogError(`verifier key ${name}: key id does not match the key`);
  return { name, keyId, publicKey };
}
/** tlog/note.py open_note: the note text once a signature by `verifier` checks. */
async function openNote(data, verifier) {
  let whole;
  try {
    whole = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data);
  } catch {
    throw new LogError("note is not UTF-8");
  }
  if (/[\u0000-\u0009\u000b-\u001f]/.test(whole)) throw new LogError("note has a control character");
  const cut = whole.lastIndexOf("\n\n");
  if (cut < 0 || !whole.endsWith("\n")) throw new LogError("note has no signature block");
  const text = whole.slice(0, cut + 1);
  const sigs = whole.slice(cut + 2);
  let good = false;
  for (const line of sigs.slice(0, -1).split("\n")) {
    if (!line.startsWith(NOTE_DASH)) throw new LogError("malformed note signature line");
    const rest = line.slice(NOTE_DASH.length);
    const at = rest.lastIndexOf(" ");
    const name = at < 0 ? "" : rest.slice(0, at);
    const b64 = at < 0 ? rest : rest.slice(at + 1);
    let blob;
    try {
      blob = b64decode(b64);
    } catch {
      throw new LogError("malformed note signature");
    }
    if (blob.length < 5) throw new LogError("malformed note signature");
    const kid = ((blob[0] << 24) >>> 0) + (blob[1] << 16) + (blob[2] << 8) + blob[3];
    if (name !== verifier.name || kid !== verifier.keyId) continue;
    if (!(await ed25519Verify(verifier.publicKey, blob.slice(4), utf8(text)))) throw new LogError(`note signature by ${name} does not verify`);
    good = true;
  }
  if (!good) throw new LogError(`note is not signed by ${verifier.name}+${verifier.keyId.toString(16).padStart(8, "0")}`);
  return text;
}
function parseCheckpoint(text) {
  const lines = text.split("\n");
  if (lines.length < 4 || lines[lines.length - 1] !== "" || lines.slice(0, -1).some((l) => !l)) {
    throw new LogError("a checkpoint has an origin, a size and a root hash line");
  }
  const [origin, sizeText, rootText] = lines;
  if (!/^[0-9]+$/.test(sizeText) || (sizeText.startsWith("0") && sizeText !== "0")) {
    throw new LogError(`checkpoint size ${pyRepr(sizeText)} is not a decimal number`);
  }
  let root;
  try {
    root = b64decode(rootText);
  } catch {
    throw new LogError("checkpoint root hash is not base64");
  }
  if (root.length !== 32) throw new LogError("checkpoint root hash is not 32 bytes");
  const size = Number(sizeText);
  if (!Number.isSafeInteger(size)) throw new LogError(`checkpoint size ${sizeText} is beyond what this page can prove`);
  return { origin, size, root };
}
/** parse_index: event id hex -> leaf index, for leaves inside the signed tree. */
function parseIndex(data, size) {
  const out = new Map();
  if (data === null) return out;
  const text = Array.from(data, (b) => (b < 0x80 ? String.fromCharCode(b) : "\ufffd")).join("");
  for (const line of text.split(/\r\n|[\n\r\u000b\u000c\u001c\u001d\u001e]/)) {
    const at = line.indexOf(" ");
    const hexId = at < 0 ? line : line.slice(0, at);
    const idx = at < 0 ? "" : line.slice(at + 1);
    if (/^[0-9]+$/.test(idx) && Number(idx) < size) out.set(hexId, Number(idx));
  }
  return out;
}
/** entry_event_hex: the event id an entry names, by its own claim (null: none). */
function entryEventHex(entry) {
  let text = null;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(entry);
  } catch {
    return null;
  }
  if (text.startsWith("pith-log-entry/sha256/v1\n")) {
    const m = COMMITTED.exec(text);
    if (m === null) return null;
    const km = EVENT_OBJECT.exec(m[2]);
    return km !== null && km[2] === m[1] ? m[1] : null;
  }
  try {
    const ev = parseJson(entry);
    if (!isDict(ev) || !hasOwn(ev, "event_id")) return null;
    const id = pyStr(ev.event_id);
    return id.startsWith("sha256:") ? id.slice(7) : id;
  } catch {
    return null;
  }
}

/** Each of the bundle's events is included under the log's current signed checkpoint. */
async function checkLog(bundle, keyDoc, fetchLog) {
  if (!isDict(keyDoc)) throw new LogError("no usable key document, so no log key to check the checkpoint with");
  if (!hasOwn(keyDoc, "log")) throw new LogError("the key document names no log key: this store keeps no transparency log");
  const member = get(keyDoc, "log");
  const vkey = isDict(member) ? get(member, "vkey") : null;
  if (!isStr(vkey)) throw new LogError("the key document names no log key (member log.vkey)");
  const verifier = await parseVkey(vkey);
  const raw = await fetchLog("checkpoint");
  if (raw === null) throw new LogError("log/checkpoint is missing: no log here");
  const cp = parseCheckpoint(await openNote(raw, verifier));
  const events = get(bundle, "events");
  if (!isList(events) || !events.every((e) => isDict(e) && hasOwn(e, "event_id"))) {
    throw new LogError("unreadable bundle (its events have no ids)");
  }
  const ids = events.map((e) => pyStr(e.event_id));
  const reader = new TileReader(fetchLog, cp.size);
  const indexes = new Map();
  let most = 0;
  for (const eventId of ids) {
    const hexId = eventId.startsWith("sha256:") ? eventId.slice(7) : eventId;
    const before = reader.reads;
    const shard = hexId.slice(0, 2);
    if (!indexes.has(shard)) indexes.set(shard, parseIndex(await fetchLog(`index/${shard}`), cp.size));
    const idx = indexes.get(shard).get(hexId);
    if (idx === undefined) throw new LogError(`event sha256:${hexId} is not in the log (size ${cp.size})`);
    const entry = (await reader.entries(Math.floor(idx / TILE_WIDTH)))[idx % TILE_WIDTH];
    const logged = entryEventHex(entry);
    if (logged !== hexId) throw new LogError(`event sha256:${hexId}: log entry ${idx} is another event (${logged === null ? "None" : "sha256:" + logged})`);
    const proof = await reader.inclusionProof(idx);
    const root = await rootFromInclusion(idx, cp.size, await leafHash(entry), proof);
    if (root === null || !bytesEqual(root, cp.root)) throw new LogError(`event sha256:${hexId}: the inclusion proof for entry ${idx} does not check`);
    most = Math.max(most, reader.reads - before);
  }
  return { size: cp.size, events: ids.length, reads: most };
}

// -- the page -------------------------------------------------------------------------------

/** The pinned fingerprint from the address's fragment (`#pin=<hex>`), or null. */
export function pinFromFragment(hash) {
  for (const part of hash.replace(/^#/, "").split("&")) {
    const at = part.indexOf("=");
    if (at > 0 && part.slice(0, at) === "pin") {
      const value = decodeURIComponent(part.slice(at + 1));
      return value === "" ? null : value;
    }
  }
  return null;
}

async function fetchBytes(url, { limit = MAX_BUNDLE_BYTES, missingOk = false } = {}) {
  const resp = await fetch(url, { cache: "no-cache", credentials: "same-origin" });
  if (resp.status === 404 && missingOk) return null;
  if (!resp.ok) throw new Malformed(`${url} answered HTTP ${resp.status}`);
  const data = new Uint8Array(await resp.arrayBuffer());
  if (data.length > limit) throw new Malformed(`${url} is over the ${limit}-byte limit`);
  return data;
}

/** Every check of this page, in PAGE_CHECKS order: [{name, status, detail}]. */
export async function verifyPage(root, hash) {
  const results = new Map();
  const put = (name, status, detail) => results.set(name, { name, status, detail });
  const base = document.baseURI;
  const pinned = pinFromFragment(hash);
  const bundleUrl = root.getAttribute("data-pith-bundle");
  const keysUrl = root.getAttribute("data-pith-keys");
  const logUrl = root.getAttribute("data-pith-log");
  let bundle;
  try {
    if (!bundleUrl) throw new Malformed("the page names no bundle (data-pith-bundle)");
    bundle = parseJson(await fetchBytes(new URL(bundleUrl, base)));
    if (!isDict(bundle)) throw new Malformed("not a JSON object");
    put("bundle", OK, `read ${bundleUrl}`);
  } catch (e) {
    put("bundle", FAIL, `unreadable: ${e.message}`);
  }
  let trusted = null;
  let keyDoc = null;
  if (!keysUrl) put("key_document", SKIP, "the page names no key document");
  else {
    try {
      keyDoc = parseJson(await fetchBytes(new URL(keysUrl, base)));
      const keys = await readKeyDocument(keyDoc);
      trusted = new Map(keys.map((k) => [k.key_id, k]));
      put("key_document", OK, `${keys.length} key(s): ` + keys.map((k) => `${k.key_id} (${k.fingerprint})`).join(", "));
    } catch (e) {
      put("key_document", FAIL, `not a usable key document (${e.message})`);
    }
  }
  if (bundle !== undefined) {
    for (const c of await verifyBundle(bundle, { pinned, trusted })) results.set(c.name, c);
    if (!logUrl) put("log", SKIP, "the page names no transparency log");
    else {
      const prefix = logUrl.endsWith("/") ? logUrl : logUrl + "/";
      const fetchLog = (path) => fetchBytes(new URL(prefix + path, base), { missingOk: true });
      try {
        const got = await checkLog(bundle, keyDoc, fetchLog);
        root.setAttribute("data-pith-log-reads", String(got.reads));
        put("log", OK, `${got.events} events included in the log's signed tree of ${got.size} (at most ${got.reads} tile reads per event)`);
      } catch (e) {
        put("log", FAIL, e.message);
      }
    }
  }
  return PAGE_CHECKS.map((name) => results.get(name) ?? { name, status: SKIP, detail: "not checked: the bundle is unreadable" });
}

const WORDS = { ok: "passed", warn: "passed with a warning", fail: "FAILED", skip: "not checked" };

function show(root, checks, verdict) {
  root.setAttribute("data-pith-verdict", verdict);
  const list = document.getElementById("pith-checks");
  if (list) {
    list.replaceChildren(
      ...checks.map((c) => {
        const li = document.createElement("li");
        li.dataset.check = c.name;
        li.dataset.status = c.status;
        li.textContent = `${c.name}: ${WORDS[c.status] ?? c.status}${c.detail ? " (" + c.detail + ")" : ""}`;
        return li;
      }),
    );
  }
  const p = document.getElementById("pith-verdict");
  if (p) {
    const failed = checks.find((c) => c.status === FAIL);
    if (verdict === "verified") {
      const pin = checks.find((c) => c.name === "pinned_key");
      p.textContent =
        "Verified in your browser: the record, its events, signatures and state all check out" +
        (pin && pin.status === OK ? ", signed with the key you pinned." : ". (Pin the registry's key by adding #pin=<fingerprint> to the address.)");
    } else if (failed) {
      p.textContent = `Not verified: the check “${failed.name}” failed: ${failed.detail}`;
    } else {
      p.textContent = "Not verified: this page's own checking script failed, so nothing it shows was checked.";
    }
  }
}

let finished = false;
let broken = false;
function scriptFailed(why) {
  broken = true;
  const root = document.documentElement;
  if (finished || root.getAttribute("data-pith-verdict") === "verified") {
    show(root, [{ name: SCRIPT_FAILURE, status: FAIL, detail: why }], `failed: ${SCRIPT_FAILURE}`);
  }
}
addEventListener("error", (e) => scriptFailed(String(e.message || "a script error")));
addEventListener("unhandledrejection", (e) => scriptFailed(String((e.reason && e.reason.message) || e.reason)));

async function main() {
  const root = document.documentElement;
  let checks;
  try {
    checks = await verifyPage(root, location.hash);
  } catch (e) {
    checks = [{ name: SCRIPT_FAILURE, status: FAIL, detail: `${e.name}: ${e.message}` }];
  }
  const failed = checks.find((c) => c.status === FAIL);
  const known = checks.length === PAGE_CHECKS.length && checks.every((c, i) => c.name === PAGE_CHECKS[i] && [OK, WARN, SKIP, FAIL].includes(c.status));
  let verdict;
  if (broken) verdict = `failed: ${SCRIPT_FAILURE}`;
  else if (failed) verdict = `failed: ${failed.name}`;
  else if (!known) verdict = `failed: ${SCRIPT_FAILURE}`;
  else verdict = "verified";
  show(root, checks, verdict);
  finished = true;
}

if (typeof document !== "undefined" && document.documentElement && document.documentElement.hasAttribute("data-pith-bundle")) {
  main();
  addEventListener("hashchange", () => {
    // a new pin: check again, and claim nothing until then
    finished = false;
    document.documentElement.setAttribute("data-pith-verdict", "pending");
    main();
  });
}
