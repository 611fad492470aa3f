"""Builds ucxcoll._C through CMake against the torch in this environment."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


def torch_root() -> Path:
    # Look torch up without importing it: under pip's build isolation the
    # environment's site-packages is not importable, but it is still there.
    for base in [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path]:
        candidate = Path(base) / "torch"
        if (candidate / "include" / "torch" / "csrc" / "distributed" / "c10d" / "Backend.hpp").exists():
            return candidate
    raise RuntimeError("torch is not installed in this environment; install torch==2.15.0 first")


def ucx_wheel_libdir():
    """The libucx wheel's lib/ in this environment, found like torch_root()."""
    for base in [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path]:
        candidate = Path(base) / "libucx" / "lib"
        if (candidate / "libucp.so").exists():
            return candidate
    return None


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = Path(os.environ.get("UCXCOLL_BUILD_DIR", ROOT / "build"))
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTORCH_ROOT={torch_root()}",
        ]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        if os.environ.get("UCX_ROOT"):
            configure.append(f"-DUCX_ROOT={os.environ['UCX_ROOT']}")
        elif ucx_wheel_libdir() is not None:
            configure.append(f"-DUCX_WHEEL_LIBDIR={ucx_wheel_libdir()}")
        subprocess.check_call(configure)
        jobs = os.environ.get("UCXCOLL_JOBS", "2")
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "_C", "-j", jobs])
        built = sorted(build_dir.glob("_C*.so"))
        if not built:
            raise RuntimeError(f"CMake did not produce _C*.so in {build_dir}")
        destination = Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], destination)


setup(
    name="ucxcoll",
    version="0.1.0",
    description="A torch.distributed backend: CPU collectives over UCX",
    python_requires=">=3.10",
    package_dir={"": "torch_ext"},
    packages=["ucxcoll"],
    py_modules=["_ucxcoll_autoload"],
    ext_modules=[CMakeExtension("ucxcoll._C")],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=["torch", "libucx-cu13"],
    entry_points={
        # torch's device-backend autoload calls this on `import torch`
        "torch.backends": ["ucxcoll = _ucxcoll_autoload:autoload"],
    },
    zip_safe=False,
)
