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
from ._sync import (Pty, Sandbox, delete_image, delete_volume, download_file, images, info, pull_image, quotas, run_code, session_files,
                    upload_file, usage, volumes)
from ._async import (AsyncPty, AsyncSandbox, async_delete_image, async_delete_volume, async_download_file, async_images, async_info, async_pull_image, async_quotas,
                     async_run_code, async_session_files, async_upload_file, async_usage, async_volumes)

__all__ = [
    "Sandbox", "AsyncSandbox", "Pty", "AsyncPty", "SandboxError", "NotFoundError",
    "CodeContext", "Execution", "ExecutionError", "FilesystemEvent", "Result",
    "CommandResult", "RunCodeResult", "SandboxInfo", "Event", "ProcessInfo", "ProcessEvent", "ImageInfo", "run_code", "async_run_code",
    "pull_image", "images", "delete_image", "async_pull_image", "async_images", "async_delete_image",
    "quotas", "usage", "volumes", "delete_volume", "info", "session_files", "upload_file", "download_file",
    "async_quotas", "async_usage", "async_volumes", "async_delete_volume", "async_info", "async_session_files", "async_upload_file", "async_download_file",
]
