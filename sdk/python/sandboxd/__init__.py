"""Python SDK of the sandbox service.

A sandbox is a container under a gVisor boundary with a toolchain, its own
filesystem and a lease that ends it. ``Sandbox`` is the synchronous client,
``AsyncSandbox`` the asyncio one; both take the server and key from
``api_url``/``api_key`` or ``SANDBOX_URL``/``SANDBOX_KEY``::

    from sandboxd import Sandbox
    with Sandbox.create() as sbx:
        print(sbx.commands.run("echo hi").stdout)
"""

from ._errors import NotFoundError, SandboxError
from ._models import CodeContext, Execution, ExecutionError, FilesystemEvent, Result
from ._models import CommandResult, Event, ImageInfo, ProcessEvent, ProcessInfo, RunCodeResult, SandboxInfo
from ._sync import Pty, Sandbox, delete_image, images, pull_image, run_code
from ._async import AsyncPty, AsyncSandbox, async_delete_image, async_images, async_pull_image, async_run_code

__all__ = [
    "Sandbox", "AsyncSandbox", "Pty", "AsyncPty", "SandboxError", "NotFoundError",
    "CodeContext", "Execution", "ExecutionError", "FilesystemEvent", "Result",
    "CommandResult", "RunCodeResult", "SandboxInfo", "Event", "ProcessInfo", "ProcessEvent", "ImageInfo", "run_code", "async_run_code",
    "pull_image", "images", "delete_image", "async_pull_image", "async_images", "async_delete_image",
]
