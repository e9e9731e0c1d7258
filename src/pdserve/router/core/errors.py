"""The client error the router answers in OpenAI's error shape."""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    """A client error, rendered as an OpenAI-style error object."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.headers = headers or {}
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param, "code": self.status}}
