"""PyTorch's own distributed test suite (the _DistTestBase tests of
torch.testing._internal.distributed.distributed_test), run the way torch's
test/distributed/test_distributed_spawn.py runs it for gloo: one spawned
process per rank, BACKEND and WORLD_SIZE from the environment.

    BACKEND=ucxcoll WORLD_SIZE=2 python test/conformance/run_torch_dist_tests.py [-k PATTERN] [-v]

scripts/dev.sh conformance runs it for ucxcoll and gloo and compares.
"""

import os
import sys
import tempfile

os.environ.setdefault("BACKEND", "ucxcoll")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="ucxcoll-dist-tests-"))

import torch  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
