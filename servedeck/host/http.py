"""HTTP to the served OpenAI-compatible API of a deployment (readiness and identity checks).

vLLM's server (``vllm/entrypoints/openai/api_server.py``, v0.11) answers ``GET /health`` with
200 once the engine serves and, when started with ``--api-key`` or ``VLLM_API_KEY``, refuses
every ``/v1/*`` request without ``Authorization: Bearer <key>`` with 401 while ``/health``
stays open. Requests here use the standard library (``http.client``): one short request per
poll, no connection pool, and no import cost for the CLI.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: ``status`` (None when no answer came), ``body`` bytes, ``error`` text."""

    status: int | None
    body: bytes = b""
    error: str = ""


class ServerApi:
    """The served API at ``base_url`` (``http://host:port``), optionally with an API key.

    The key is sent as ``Authorization: Bearer <key>``; it is never part of any message.
    """

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 2.0) -> None:
        parts = urlsplit(base_url)
        self.base_url = base_url.rstrip("/")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.api_key = api_key
        self.timeout_s = timeout_s

    def get(self, path: str) -> Answer:
        """``GET path``; transport failures (refused, reset, timeout) are an Answer with
        ``status=None``, never an exception."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return Answer(resp.status, resp.read())
        except (OSError, http.client.HTTPException, socket.timeout) as exc:
            return Answer(None, b"", f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    def served_models(self) -> tuple[int | None, list[str]]:
        """``(status, ids)`` of ``GET /v1/models`` (ids empty unless status 200 with JSON)."""
        ans = self.get("/v1/models")
        if ans.status != 200:
            return ans.status, []
        try:
            data = json.loads(ans.body)
            return 200, [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            return 200, []
