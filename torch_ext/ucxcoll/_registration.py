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


def _create_backend(dist_backend_options, backend_options):
    """Called by torch.distributed (extended API) once per process group."""
    from ucxcoll import _C

    return _C.create_backend(dist_backend_options)


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
