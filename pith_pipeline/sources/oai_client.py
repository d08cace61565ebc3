"""HTTP for OAI-PMH: scythe's client pinned to one connection, every request through
the run's politeness `Gate`, bodies capped and requests given a total deadline.
"""

from __future__ import annotations

import time

import httpx2
from oaipmh_scythe import Scythe
from oaipmh_scythe.config import HTTPConfig

from pith_pipeline import config
from pith_pipeline._internal.capped import deadline_scope, deadline_transport, read_capped
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.errors import RequestDeadlineError, ResponseTooLargeError, TerminalError, TransientError
from pith_pipeline.sources.politeness import Gate, Politeness

DEFAULT_OAI_URL = config.DEFAULT_OAI_URL
OAI_URL_ENV = config.env_name("oai_url")


class _OneConnectionScythe(Scythe):
    """scythe's client, limited to one connection, with an optional transport."""

    def __init__(
        self, endpoint: str, policy: Politeness, transport: httpx2.BaseTransport | None = None
    ) -> None:
        super().__init__(
            endpoint, http_config=HTTPConfig(timeout=policy.timeout, user_agent=policy.user_agent)
        )
        self._transport = transport

    @property
    def client(self) -> httpx2.Client:
        if self._client is None or self._client.is_closed:
            limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1)
            self._client = httpx2.Client(
                headers={"Accept": "text/xml, application/xml", "User-Agent": self.http_config.user_agent},
                timeout=self.http_config.timeout,
                limits=limits,
                follow_redirects=False,  # see OAIClient.request
                # sockets that honour the request's total deadline (see capped.py)
                transport=self._transport or deadline_transport(limits),
            )
        return self._client


class OAIClient:
    """HTTP for OAI-PMH: scythe's client, every request through the gate.

    Bodies are streamed with a cap (`limits.response_bytes`) and every request has a
    total deadline (`limits.request_deadline`) on top of the read timeout.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_OAI_URL,
        *,
        gate: Gate | None = None,
        transport: httpx2.BaseTransport | None = None,
        limits: InputLimits = DEFAULT_LIMITS,
    ) -> None:
        self.base_url = base_url
        self.gate = gate or Gate()
        self.limits = limits
        self._scythe = _OneConnectionScythe(base_url, self.gate.policy, transport)

    def close(self) -> None:
        self._scythe.close()

    def __enter__(self) -> OAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(
        self, client: httpx2.Client, params: dict[str, str], what: str, too_large: list[bool]
    ) -> httpx2.Response:
        """One GET, its body read with the cap and the deadline (`too_large` records
        whether it was cut, so the gate still sees a response and keeps its spacing)."""
        deadline = self.limits.request_deadline
        with deadline_scope(deadline) as started:
            try:
                request = client.build_request("GET", self.base_url, params=params)
                response = client.send(request, stream=True)
                try:
                    body = read_capped(
                        response.iter_bytes(),
                        cap=self.limits.response_bytes,
                        started=started,
                        deadline=deadline,
                        what=what,
                    )
                finally:
                    response.close()
            except httpx2.TimeoutException:
                if time.monotonic() - started < deadline:
                    raise
                raise RequestDeadlineError(
                    f"{what}: no complete response within the deadline of {deadline:g} s"
                ) from None
        response._content = body.data  # what `read()` would have set
        too_large[:] = [body.too_large]
        return response

    def request(self, params: dict[str, str]) -> httpx2.Response:
        what = f"OAI-PMH {params.get('verb')} at {self.base_url}"
        client = self._scythe.client
        too_large = [False]
        try:
            response = self.gate.send(
                lambda: self._get(client, params, what, too_large),
                what=what,
                retry_on=(
                    httpx2.TimeoutException,
                    httpx2.NetworkError,
                    httpx2.RemoteProtocolError,
                    RequestDeadlineError,
                ),
                endpoint=self.base_url,
            )
        except httpx2.HTTPError as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from None
        if too_large[0]:
            raise ResponseTooLargeError(
                f"{what}: response larger than the limit of {self.limits.response_bytes} bytes; "
                "stopped reading it (see docs/pages/input-limits.md)"
            )
        if 300 <= response.status_code < 400:  # following it would be a second, unspaced request
            location = response.headers.get("location")
            if location is None:
                raise TerminalError(f"{what}: HTTP {response.status_code} redirect without a Location")
            raise TerminalError(
                f"{what}: HTTP {response.status_code}, redirected to {location}; "
                f"set --oai-url (or {OAI_URL_ENV}) to that address"
            )
        return response
