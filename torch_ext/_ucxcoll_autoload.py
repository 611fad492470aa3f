"""torch.backends entry point: ``import torch`` calls autoload().

It must never make ``import torch`` fail, so a broken ucxcoll install only
warns (and the backend is then not available by name).
"""

import warnings


def autoload() -> None:
    try:
        import ucxcoll  # noqa: F401  (importing registers the backend)
    except Exception as error:  # noqa: BLE001
        warnings.warn(f"ucxcoll: backend not registered ({type(error).__name__}: {error})", stacklevel=2)
