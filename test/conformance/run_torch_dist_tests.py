"""PyTorch's own distributed test suite (the _DistTestBase tests of
torch.testing._internal.distributed.distributed_test), run the way torch's
test/distributed/test_distributed_spawn.py runs it for gloo: one spawned
process per rank, BACKEND and WORLD_SIZE from the environment.

    BACKEND=ucxcoll WORLD_SIZE=2 python test/conformance/run_torch_dist_tests.py [-k PATTERN] [-v]

scripts/dev.sh conformance runs it for ucxcoll and gloo and compares.
"""

import os
import tempfile

os.environ.setdefault("BACKEND", "ucxcoll")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="ucxcoll-dist-tests-"))

import torch  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


# Tests that torch restricts to gloo by the backend's name alone: the skip
# says so and nothing else. ucxcoll is a drop-in for gloo on CPU, so they
# run on it too (and must pass wherever they pass on gloo). Skips for any
# other reason (a GPU, a feature gloo lacks as well) stay.
BACKEND = os.environ["BACKEND"]
SKIPPED_BY_NAME_ONLY = (
    f"The {BACKEND} backend does not support DistributedDataParallel",
    "get_future is only supported on mpi, nccl and gloo",
    "Only gloo backend supports timeouts",
    "GLOO Batch Send Recv CPU",
    "Only Gloo backend supports sparse all reduce",
    # backend_feature["subgroup"] lists backends by name; gloo runs these on CPU.
    f"The {BACKEND} backend does not support creating subgroups on CUDA devices",
)


def skipped_by_name_only(reason: str) -> bool:
    if reason.startswith(f"Test requires backend {BACKEND} to be one of ") and "'gloo'" in reason:
        return True
    return reason in SKIPPED_BY_NAME_ONLY


if BACKEND != "gloo":
    for name, test in vars(DistributedTest._DistTestBase).items():
        if name.startswith("test_") and getattr(test, "__unittest_skip__", False):
            if skipped_by_name_only(getattr(test, "__unittest_skip_why__", "")):
                test.__unittest_skip__ = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
