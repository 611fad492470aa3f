"""ucxcoll under torchft (PyTorch's fault-tolerance library).

`ProcessGroupUcxcoll` is a reconfigurable process group shaped like
torchft's own `ProcessGroupGloo`: torchft's Manager calls
`configure(store_addr, replica_id, rank, world_size, ...)` at every
membership change, and each call builds a fresh ucxcoll group from the
store it names (the previous one is aborted first, so that a survivor
still waiting in it raises at once). `errored()`, `abort()`, `shutdown()`
and `set_timeout()` act on the live group.

    from ucxcoll.torchft import ProcessGroupUcxcoll
    pg = ProcessGroupUcxcoll(timeout=timedelta(seconds=30))
    manager = torchft.Manager(pg=pg, ...)

Importing this module needs torchft; ucxcoll itself never does.
"""

from __future__ import annotations

from datetime import timedelta

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torch.distributed import Store
from torchft.process_group import ProcessGroupWrapper

from ucxcoll import _C

__all__ = ["ProcessGroupUcxcoll"]


class ProcessGroupUcxcoll(ProcessGroupWrapper):
    """A reconfigurable ucxcoll process group for torchft (CPU tensors over
    UCX; CUDA tensors go to NCCL as with `backend="ucxcoll"`)."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._backend = None

    def _create_pg(self, store: Store, rank: int, world_size: int) -> BaseProcessGroup:
        from torch._C._distributed_c10d import _DistributedBackendOptions

        options = _DistributedBackendOptions()
        options.store = store
        options.group_rank = rank
        options.group_size = world_size
        options.timeout = self._timeout
        # Names the group in ucxcoll's errors, as torchft names gloo's.
        if self._group_rank is not None and self._group_world_size:
            options.group_id = (f"torchft_quorum_{self._quorum_id}_rank_"
                                f"{self._group_rank % self._group_world_size}")
        else:
            options.group_id = f"torchft_replica_{self._replica_id}"
        options.global_ranks_in_group = list(self._global_ranks or range(world_size))
        backend = _C.create_backend(options)
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        pg._register_backend(torch.device("cpu"), BaseProcessGroup.BackendType.CUSTOM, backend)
        if torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), BaseProcessGroup.BackendType.CUSTOM, backend)
        self._backend = backend
        return pg

    def getBackendName(self) -> str:
        return "torchft-ucxcoll"

    def set_timeout(self, timeout: timedelta) -> None:
        # The next configure() and the live group alike.
        super().set_timeout(timeout)
        if self._backend is not None:
            self._backend.set_timeout(timeout)

    def abort(self, errored: bool = True) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            # Peers waiting for this rank raise at once ("aborted its group").
            backend.abort()
        super().abort(errored=errored)

    def shutdown(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.shutdown()
        super().shutdown()
