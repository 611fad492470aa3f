"""ucxcoll under torchft: torchft's own process-group cases
(torchft_cases.py) in a process of their own. torchft is an optional test
dependency (requirements-torchft.txt): without it these skip, saying so."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MISSING = [name for name in ("torchft", "parameterized") if importlib.util.find_spec(name) is None]
needs_torchft = pytest.mark.skipif(
    bool(MISSING), reason=f"needs {' and '.join(MISSING)} (pip install --no-deps torchft; requirements-torchft.txt)"
)


@needs_torchft
def test_torchft_process_group_cases_pass_on_ucxcoll():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "torchft_cases.py"],
        cwd=HERE, capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-12000:]
    # Every collective torchft wraps, plain and with resiliency: none skipped.
    import torchft.process_group_test as upstream  # noqa: PLC0415 - optional

    expected = 2 * len(upstream._ALL_COLLECTIVES)
    summary = re.search(r"(\d+) passed", output)
    assert summary and int(summary.group(1)) == expected and "skipped" not in output, output[-3000:]
