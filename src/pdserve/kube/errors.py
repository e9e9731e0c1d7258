"""Typed API errors: one exception for every pdserve caller of the API server."""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """A non-2xx answer, with the API server's own message."""

    def __init__(self, status: int, message: str, method: str = "", path: str = ""):
        super().__init__(f"{method} {path}: {status} {message}".strip())
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        """Worth retrying as is: no answer (status 0), a conflict, throttling or a server-side failure."""
        return self.status in (0, 409, 429) or self.status >= 500

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @classmethod
    def from_api_exception(cls, exc: Any, method: str = "", path: str = "") -> KubeError:
        """From the official client's ``ApiException`` (status 0: no answer at all)."""
        import json

        message = str(getattr(exc, "reason", "") or exc)
        body = getattr(exc, "body", None)
        if body:
            try:
                message = json.loads(body).get("message", message)
            except (ValueError, AttributeError, TypeError):
                pass
        return cls(int(getattr(exc, "status", 0) or 0), message, method, path)
