"""Errors: the server's refusal, its status and message unchanged."""

from __future__ import annotations

import json
from typing import Optional

import httpx


class SandboxError(Exception):
    """A refusal of the server: ``status`` and ``message`` as it sent them."""

    def __init__(self, status: int, message: str, retry_after: Optional[int] = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class NotFoundError(SandboxError):
    """404: no such sandbox (another org's answers the same)."""


def refusal(res: httpx.Response) -> SandboxError:
    try:
        message = json.loads(res.content).get("error") or res.text
    except (ValueError, AttributeError):
        message = res.text.strip()
    retry = res.headers.get("Retry-After")
    retry_after = int(retry) if retry and retry.isdigit() else None
    cls = NotFoundError if res.status_code == 404 else SandboxError
    return cls(res.status_code, message, retry_after)


#: Calls a 503 may be repeated for: the server did nothing, or doing it
#: again changes nothing. A 429 is a refusal before any work, for any call.
SAFE_METHODS = {"GET", "PUT", "DELETE"}


def should_retry(method: str, err: SandboxError, attempt: int, retries: int) -> bool:
    if attempt >= retries or not err.retry_after:
        return False
    return err.status == 429 or (err.status == 503 and method in SAFE_METHODS)
