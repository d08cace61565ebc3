"""A local endpoint speaking KMS's JSON protocol for Ed25519 keys (tests, benchmarks, demos).

moto implements symmetric KMS but cannot create Ed25519 (`ECC_NIST_EDWARDS25519`)
keys, so the `kms:` signer is exercised against this server instead: a real HTTP
server on 127.0.0.1 answering `TrentService.GetPublicKey` and `TrentService.Sign`
the way the KMS API reference describes them (base64 blobs in JSON, errors as
`{"__type": ..., "message": ...}` with the HTTP status KMS uses), backed by pynacl
keys. It records every request so tests can assert exactly what was sent, and it
can inject latency, throttling, internal errors, access denial, disabled keys and
a wrong key (a signature that does not match the published public key).

What this cannot show — that AWS itself accepts these requests and returns a
signature in this form — is verified only against AWS (see README).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import nacl.signing

from pith_pipeline.signing.kms import ED25519_SPKI_PREFIX, KEY_SPEC, SIGNING_ALGORITHM

REGION = "us-east-1"
ACCOUNT = "111122223333"


@dataclass
class LocalKey:
    key_id: str
    signing_key: nacl.signing.SigningKey
    enabled: bool = True
    # when set, Sign uses this key instead (GetPublicKey still shows the real one)
    sign_with: nacl.signing.SigningKey | None = None

    @property
    def arn(self) -> str:
        return f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{self.key_id}"


@dataclass
class LocalKms:
    """State shared by the handler threads."""

    keys: dict[str, LocalKey] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    latency: float = 0.0
    faults: deque[tuple[str, int]] = field(default_factory=deque)  # (code, HTTP status)
    denied: set[str] = field(default_factory=set)  # key ids the caller may not use
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    max_in_flight: int = 0

    def add_key(self, key_id: str, seed: bytes | None = None, alias: str | None = None) -> LocalKey:
        sk = nacl.signing.SigningKey(seed) if seed else nacl.signing.SigningKey.generate()
        key = LocalKey(key_id, sk)
        self.keys[key_id] = key
        if alias:
            self.aliases[alias] = key_id
        return key

    def resolve(self, ident: str) -> LocalKey | None:
        if ident.startswith("arn:aws:kms:"):
            ident = ident.split(":", 5)[5]
            ident = ident.split("/", 1)[1] if ident.startswith("key/") else ident
        if ident.startswith("alias/"):
            ident = self.aliases.get(ident, "")
        return self.keys.get(ident)


class _Error(Exception):
    def __init__(self, code: str, status: int = 400, message: str = "") -> None:
        super().__init__(code)
        self.code, self.status, self.message = code, status, message or code


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_POST(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        target = self.headers.get("X-Amz-Target", "")
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        with state.lock:
            state.requests.append(
                {
                    "target": target,
                    "body": body,
                    "content_type": self.headers.get("Content-Type"),
                    "authorized": "AWS4-HMAC-SHA256" in self.headers.get("Authorization", ""),
                }
            )
            fault = state.faults.popleft() if state.faults else None
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if state.latency:
                time.sleep(state.latency)
            self._handle(state, target, body, fault)
        finally:
            with state.lock:
                state.in_flight -= 1

    def _handle(
        self, state: LocalKms, target: str, body: dict[str, Any], fault: tuple[str, int] | None
    ) -> None:
        try:
            if fault:
                raise _Error(fault[0], fault[1])
            op = target.removeprefix("TrentService.")
            if op == "GetPublicKey":
                out = self._get_public_key(state, body)
            elif op == "Sign":
                out = self._sign(state, body)
            else:
                raise _Error("UnsupportedOperationException", 400, f"{op} not implemented")
            self._reply(200, out)
        except _Error as err:
            self._reply(err.status, {"__type": err.code, "message": err.message})

    def _key(self, state: LocalKms, body: dict[str, Any]) -> LocalKey:
        key = state.resolve(str(body.get("KeyId", "")))
        if key is None:
            raise _Error("NotFoundException", 400, "Key does not exist")
        if key.key_id in state.denied:
            raise _Error("AccessDeniedException", 400, "not authorized to perform kms:Sign")
        if not key.enabled:
            raise _Error("DisabledException", 400, f"{key.arn} is disabled.")
        return key

    def _get_public_key(self, state: LocalKms, body: dict[str, Any]) -> dict[str, Any]:
        key = self._key(state, body)
        der = ED25519_SPKI_PREFIX + bytes(key.signing_key.verify_key)
        return {
            "KeyId": key.arn,
            "PublicKey": base64.b64encode(der).decode(),
            "KeySpec": KEY_SPEC,
            "CustomerMasterKeySpec": KEY_SPEC,
            "KeyUsage": "SIGN_VERIFY",
            "SigningAlgorithms": [SIGNING_ALGORITHM, "ED25519_PH_SHA_512"],
        }

    def _sign(self, state: LocalKms, body: dict[str, Any]) -> dict[str, Any]:
        key = self._key(state, body)
        alg = body.get("SigningAlgorithm")
        if alg not in (SIGNING_ALGORITHM, "ED25519_PH_SHA_512"):
            raise _Error("InvalidKeyUsageException", 400, f"{alg} is not valid for key spec {KEY_SPEC}")
        if alg == SIGNING_ALGORITHM and body.get("MessageType", "RAW") != "RAW":
            raise _Error("ValidationException", 400, "ED25519_SHA_512 requires MessageType RAW")
        msg = base64.b64decode(body.get("Message", ""))
        sk = key.sign_with or key.signing_key
        sig = sk.sign(msg).signature
        return {"KeyId": key.arn, "Signature": base64.b64encode(sig).decode(), "SigningAlgorithm": alg}

    def _reply(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", "local-" + str(time.monotonic_ns()))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, state: LocalKms) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class LocalKmsServer:
    """Start with `with LocalKmsServer() as kms:`; `kms.url` is the endpoint URL."""

    def __init__(self, state: LocalKms | None = None) -> None:
        self.state = state or LocalKms()
        self._server = _Server(self.state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True, name="local-kms"
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LocalKmsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalKmsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
