"""Registration of the ``ucxcoll`` backend with torch.distributed."""

import atexit
import threading
import weakref
from collections.abc import Callable
from typing import NamedTuple

BACKEND_NAME = "ucxcoll"
DEVICES = ["cpu", "cuda"]

_lock = threading.Lock()
_registered = False


def _preload_ucx() -> None:
    # The extension links libucp.so.0 by soname. Loading the libucx wheel's
    # copies first makes the dynamic linker reuse them, also for editable
    # installs where the module's relative RPATH does not reach the wheel.
    try:
        import libucx
    except ImportError:
        return  # a system UCX (UCX_ROOT build) is found through the RPATH
    libucx.load_library()


# What torch gave each group (by group name) that its NCCL side needs when
# it is made later: the user's pg_options (ProcessGroupNCCL.Options), the
# ProcessGroup object (weakly: the group owns this backend) and whether the
# group was made reconfigurable (torch >= 2.15).
class _GroupCreation(NamedTuple):
    nccl_options: object | None
    process_group: Callable[[], object | None]
    enable_reconfigure: bool


_creation_by_group: dict[str, _GroupCreation] = {}


def _create_backend(dist_backend_options, backend_options):
    """Called by torch.distributed (extended API) once per process group."""
    from ucxcoll import _C

    # Group names repeat after destroy_process_group(): what an earlier
    # group of the same name was given is replaced.
    nccl_options_type = _nccl_options_type()
    nccl_options = None
    if nccl_options_type is not None and isinstance(backend_options, nccl_options_type):
        nccl_options = backend_options
    group = getattr(dist_backend_options, "process_group", None)  # torch >= 2.15
    _creation_by_group[dist_backend_options.group_id] = _GroupCreation(
        nccl_options=nccl_options,
        process_group=weakref.ref(group) if group is not None else (lambda: None),
        enable_reconfigure=bool(getattr(dist_backend_options, "enable_reconfigure", False)),
    )
    return _C.create_backend(dist_backend_options, _default_group_backend(_C))


def _default_group_backend(_C):
    """The default group's ucxcoll backend, or None (no default group yet,
    or another backend runs its CPU tensors). A new group whose ranks are
    all in it is made from its connections: its members trade a channel
    each over UCX and touch no store."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return None  # this is the default group being made
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    except (RuntimeError, ValueError):
        return None
    return backend if isinstance(backend, _C.UcxcollBackend) else None


def _nccl_options_type():
    import torch.distributed as dist

    if not dist.is_nccl_available():
        return None
    return dist.ProcessGroupNCCL.Options


def _torch_nccl_creator():
    """The function that backend="nccl" calls on the running torch to make a
    group's backend, or None where torch builds ProcessGroupNCCL inline.

    torch 2.15 registers "nccl" like any plugin, lazily, and the creator it
    registers depends on TORCH_DIST_USE_NCCL2 (unset: ProcessGroupNCCL2, the
    torchcomms engine; "0": the legacy ProcessGroupNCCL), read once per
    process when the name is first registered. Asking torch's registry gives
    the same answer backend="nccl" gets in this process. torch 2.11-2.14 have
    no registry entry for "nccl" (ProcessGroupNCCL, made in
    _new_process_group_helper itself)."""
    import torch.distributed as dist

    ensure_registered = getattr(dist.Backend, "_ensure_backend_registered", None)
    if ensure_registered is None:
        return None
    ensure_registered(dist.Backend.NCCL)
    plugin = dist.Backend._plugins.get(dist.Backend.NCCL.upper())
    if plugin is None or not plugin.extended_api:
        return None
    return plugin.creator_fn


def _make_gpu_backend(store, rank, size, timeout_ms, group_name, global_ranks):
    """The backend for a group's CUDA tensors: what backend="nccl" makes on
    the running torch, for the same ranks, on its own part of the group's
    store. Called by the extension the first time a CUDA tensor reaches the
    group (or at once for init_process_group(device_id=cuda:N))."""
    from datetime import timedelta

    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise RuntimeError(
            "this torch build has no NCCL (torch.distributed.is_nccl_available() is False); "
            "CUDA tensors need a CUDA build of torch"
        )
    creation = _creation_by_group.get(group_name)
    nccl_store = dist.PrefixStore("nccl/", store)
    timeout = timedelta(milliseconds=timeout_ms)
    creator = _torch_nccl_creator()
    if creator is not None:
        from torch._C._distributed_c10d import _DistributedBackendOptions

        opts = _DistributedBackendOptions()
        opts.store = nccl_store
        opts.group_rank = rank
        opts.group_size = size
        opts.timeout = timeout
        opts.group_id = group_name
        opts.global_ranks_in_group = list(global_ranks)
        if creation is not None:
            opts.process_group = creation.process_group()
            opts.enable_reconfigure = creation.enable_reconfigure
        # split_from stays unset: the split's ucxcoll parent is no NCCL
        # backend, so NCCL makes the child's communicator from the store.
        return creator(opts, creation.nccl_options if creation is not None else None)
    # torch < 2.15: what _new_process_group_helper does for "nccl".
    options = creation.nccl_options if creation is not None else None
    if options is None:
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = False
    options._timeout = timeout
    options.global_ranks_in_group = list(global_ranks)
    options.group_name = group_name
    return dist.ProcessGroupNCCL(nccl_store, rank, size, options)


def _records_natively(pg, backend_config, _C):
    """The group's ucxcoll backend if ucxcoll may write the group's flight
    recorder entries itself, else None (torch's hook records the group).

    Only where every backend of the group is ucxcoll and no CUDA device is
    usable: CUDA tensors go to NCCL, whose operations ucxcoll cannot retire
    at completion, and torch's hook records a group whole or not at all."""
    import torch

    names = set(backend_config.get_device_backend_map().values())
    if names != {BACKEND_NAME} or torch.cuda.is_available():
        return None
    backend = pg._get_backend(torch.device("cpu"))
    return backend if isinstance(backend, _C.UcxcollBackend) else None


def _install_flight_recording(c10d, _C) -> None:
    """torch 2.15 attaches a FlightRecorderHook to every group of a backend
    outside its _FR_SELF_RECORDING_BACKENDS; an 8-byte all_reduce takes about
    1 us more with that hook than with ucxcoll's own entries (measured,
    docs/BENCHMARKS.md).
    Where ucxcoll records the group itself (see _records_natively) it starts
    its own recording instead of the hook, under the group's name,
    description and global ranks, which torch has set by this call."""
    original = getattr(c10d, "_maybe_attach_flight_recorder", None)
    if original is None or getattr(original, "_ucxcoll", False) or not _C._records_flight_natively():
        return

    def attach_flight_recorder(pg, backend_config, global_ranks):
        backend = _records_natively(pg, backend_config, _C)
        if backend is None:
            return original(pg, backend_config, global_ranks)
        backend._start_flight_recording(pg.group_name, pg.group_desc, list(global_ranks))
        return None

    attach_flight_recorder._ucxcoll = True
    c10d._maybe_attach_flight_recorder = attach_flight_recorder


def is_registered() -> bool:
    import torch.distributed as dist

    return BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {})


def register() -> None:
    """Register the backend; calling it again (or after autoload) is a no-op."""
    global _registered
    with _lock:
        if _registered:
            return
        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("ucxcoll needs a torch build with torch.distributed")
        _preload_ucx()
        from ucxcoll import _C  # fail here, not at first use

        # At exit, while the interpreter is still whole: let collectives the
        # script did not wait for finish (up to UCXCOLL_EXIT_GRACE_MS), then
        # stop the progress thread, so that no thread of ours asks for the
        # GIL during finalization (CPython would end it with pthread_exit,
        # which aborts the process). Registered at import, so it runs after
        # the script's own atexit handlers (e.g. destroy_process_group).
        atexit.register(_C._stop_progress_thread)

        _install_flight_recording(dist.distributed_c10d, _C)
        if not is_registered():
            dist.Backend.register_backend(
                BACKEND_NAME, _create_backend, extended_api=True, devices=DEVICES
            )
        _registered = True
