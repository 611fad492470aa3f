"""Registration of the ``ucxcoll`` backend with torch.distributed."""

import atexit
import threading

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


# ProcessGroupNCCL.Options a user passed as pg_options, by group name: they
# configure the group's NCCL side when it is created.
_nccl_options_by_group = {}


def _create_backend(dist_backend_options, backend_options):
    """Called by torch.distributed (extended API) once per process group."""
    from ucxcoll import _C

    # Group names repeat after destroy_process_group(): forget what an
    # earlier group of the same name was given.
    _nccl_options_by_group.pop(dist_backend_options.group_id, None)
    nccl_options_type = _nccl_options_type()
    if nccl_options_type is not None and isinstance(backend_options, nccl_options_type):
        _nccl_options_by_group[dist_backend_options.group_id] = backend_options
    return _C.create_backend(dist_backend_options)


def _nccl_options_type():
    import torch.distributed as dist

    if not dist.is_nccl_available():
        return None
    return dist.ProcessGroupNCCL.Options


def _make_gpu_backend(store, rank, size, timeout_ms, group_name, global_ranks):
    """The backend for a group's CUDA tensors: torch's own ProcessGroupNCCL
    for the same ranks, on its own part of the group's store. Called by the
    extension the first time a CUDA tensor reaches the group (or at once for
    init_process_group(device_id=cuda:N))."""
    from datetime import timedelta

    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise RuntimeError(
            "this torch build has no NCCL (torch.distributed.is_nccl_available() is False); "
            "CUDA tensors need a CUDA build of torch"
        )
    options = _nccl_options_by_group.get(group_name)
    if options is None:
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = False
    options._timeout = timedelta(milliseconds=timeout_ms)
    options.global_ranks_in_group = list(global_ranks)
    options.group_name = group_name
    return dist.ProcessGroupNCCL(dist.PrefixStore("nccl/", store), rank, size, options)


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

        if not is_registered():
            dist.Backend.register_backend(
                BACKEND_NAME, _create_backend, extended_api=True, devices=DEVICES
            )
        _registered = True
