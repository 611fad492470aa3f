"""ucxcoll: a torch.distributed backend over UCX.

Importing this package registers the backend under the name ``ucxcoll``;
scripts that never import it get the same registration through torch's
backend autoload (the ``torch.backends`` entry point).
"""

from ucxcoll._registration import BACKEND_NAME, is_registered, register
from ucxcoll._version import __version__

register()

__all__ = ["BACKEND_NAME", "__version__", "is_registered", "register", "ucx_version"]


def ucx_version() -> str:
    """Version of the UCX library loaded at run time."""
    from ucxcoll import _C

    return _C.ucx_version()
