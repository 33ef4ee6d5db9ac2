"""What the API answers, as typed values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class SandboxInfo:
    """The Sandbox object. Times are Unix seconds."""

    id: str
    kind: str
    org: str
    class_: str
    status: str
    image: str
    runtime: str
    workdir: str
    created_at: int
    last_used_at: int
    expires_at: int
    project: Optional[str] = None
    volume: Optional[str] = None
    error: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"], kind=d["kind"], org=d["org"], class_=d["class"], status=d["status"], image=d["image"],
            runtime=d["runtime"], workdir=d["workdir"], created_at=d["createdAt"], last_used_at=d["lastUsedAt"],
            expires_at=d["expiresAt"], project=d.get("project"), volume=d.get("volume"), error=d.get("error"),
            metadata=d.get("metadata") or {},
        )


@dataclass
class CommandResult:
    """A finished command; a non-zero exit is a result, not an error."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    stopped: bool = False

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "CommandResult":
        return cls(d["exitCode"], d["stdout"], d["stderr"], d.get("timedOut", False), d.get("stopped", False))


@dataclass
class RunCodeResult:
    """A finished interpreter run; ``files`` are those it created or changed."""

    session_id: str
    exit_code: int
    stdout: str
    stderr: str
    files: List[Dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "RunCodeResult":
        return cls(d["session_id"], d["exitCode"], d["stdout"], d["stderr"], d.get("files") or [], d.get("timedOut", False))


@dataclass
class Event:
    """One entry of a session's live log."""

    seq: int
    kind: str
    text: str
    at: str


def exec_body(cmd: Any, stdin: Optional[str], cwd: Optional[str], timeout: Optional[float],
              env: Optional[Dict[str, str]], session: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"argv": list(cmd)} if isinstance(cmd, (list, tuple)) else {"command": cmd}
    if stdin is not None:
        body["stdin"] = stdin
    if cwd:
        body["dir"] = cwd
    if timeout:
        body["timeoutSec"] = max(1, int(timeout))
    if env:
        body["env"] = env
    if session:
        body["session"] = session
    return body


def lease_body(class_: Optional[str], project: Optional[str], image: Optional[str], timeout: Optional[float]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if class_:
        body["class"] = class_
    if project:
        body["project"] = project
    if image:
        body["image"] = image
    if timeout:
        body["ttlSec"] = int(timeout)
    return body


def parse_sse(lines):
    """Yield events from an iterable of SSE lines."""
    import json

    for line in lines:
        if line.startswith("data: "):
            d = json.loads(line[6:])
            yield Event(d["seq"], d["kind"], d["text"], d["at"])
