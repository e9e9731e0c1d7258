"""Kubernetes Events through kopf's own poster (``kopf.event``).

kopf queues the Event and posts it in the background with its backoffs, so a failing
API server never blocks a reconcile or a planner interval. Posting works from any
code running under ``kopf.operator`` (handlers, daemons, and threads they start with
``asyncio.to_thread``, which carries kopf's context along)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import kopf

# kopf passes the message through; the API server refuses Events longer than this.
MAX_MESSAGE = 1024


class NotUnderKopf(RuntimeError):
    """``post`` was called outside ``kopf.operator`` (no event queue to post to)."""


def post(involved: Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
    """Queue an Event about ``involved`` (a resource body with apiVersion, kind and metadata)."""
    try:
        # kopf only reads apiVersion, kind and metadata from it, which a plain body has.
        kopf.event(cast(kopf.Body, dict(involved)), type="Warning" if warning else "Normal", reason=reason, message=message[:MAX_MESSAGE])
    except LookupError as e:  # kopf's context variables are unset
        raise NotUnderKopf(f"event {reason} needs a running kopf operator") from e


class Poster(Protocol):
    """What shells take to post Events: ``post`` in production, a recorder in unit tests."""

    def __call__(self, involved: Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None: ...
