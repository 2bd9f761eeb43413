"""How the playbook starts the Jupyter kernels that execute its notebooks (a run's steps, ``compare``)."""

from __future__ import annotations

from typing import Any

from jupyter_client.manager import AsyncKernelManager

from playbook.process import dies_with_this_thread

# The kernel's own log (its TCP transport warning, the interrupt it logs as it shuts down) says nothing about
# the notebook it runs; the notebook's errors reach papermill either way.
QUIET_KERNEL = ["--IPKernelApp.log_level=CRITICAL"]


class KernelBoundToPlaybook(AsyncKernelManager):
    """A kernel that is killed as soon as the playbook process that started it dies.

    jupyter_client starts kernels in their own session, and ipykernel notices a dead parent only about a
    second later: long enough, after a ``kill -9`` of ``playbook run``, for an orphaned step to finish and
    record an outcome in a run folder that ``resume`` has already taken over.
    """

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        bind = dies_with_this_thread()
        if bind is not None:
            kw["preexec_fn"] = bind
        await super()._async_launch_kernel(kernel_cmd, **kw)


def papermill_options(*, verbose: bool = False) -> dict[str, Any]:
    """The keyword arguments every ``papermill.execute_notebook`` call of the playbook passes."""
    return {"kernel_name": "python3", "progress_bar": False, "kernel_manager_class": KernelBoundToPlaybook,
            "extra_arguments": [] if verbose else QUIET_KERNEL}
