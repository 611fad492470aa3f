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


@needs_torchft
def test_ddp_under_torchft_manager_goes_on_when_a_replica_is_killed_and_takes_it_back(tmp_path):
    """examples/torchft_ddp.py: two replica groups (one process each) train
    under torchft's Manager with ucxcoll between them and a local
    lighthouse. Replica 1 is SIGKILLed in the middle of step 10 and started
    again 3 s later: replica 0 must go on alone meanwhile, replica 1 must come back
    at the current step (recovered from replica 0, not from scratch), and
    both must end at the same step with the same weights."""
    import json
    import signal
    import time

    from torchft._torchft import LighthouseServer  # noqa: PLC0415 - optional

    example = os.path.join(HERE, "..", "..", "examples", "torchft_ddp.py")
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=1000, heartbeat_timeout_ms=1000)
    logs = {}

    def replica(replica_id, name, *extra):
        log = open(tmp_path / f"{name}.log", "w")
        logs[name] = tmp_path / f"{name}.log"
        return subprocess.Popen([sys.executable, example, "--replica-id", str(replica_id), "--lighthouse",
                                 lighthouse.address(), "--steps", "100", "--step-seconds", "0.2", *extra],
                                stdout=log, stderr=subprocess.STDOUT)

    def output(name):
        return logs[name].read_text()[-6000:]

    try:
        first = replica(0, "replica0", "--report", str(tmp_path / "replica0.json"))
        doomed = replica(1, "replica1_killed", "--die-at-step", "10")
        assert doomed.wait(timeout=300) == -signal.SIGKILL, output("replica1_killed")
        time.sleep(3)
        second = replica(1, "replica1_restarted", "--report", str(tmp_path / "replica1.json"))
        assert first.wait(timeout=300) == 0, output("replica0")
        assert second.wait(timeout=300) == 0, output("replica1_restarted")
    finally:
        lighthouse.shutdown()
    reports = [json.loads((tmp_path / f"replica{r}.json").read_text()) for r in (0, 1)]
    steps0, steps1 = reports[0]["steps"], reports[1]["steps"]
    # Replica 0 trained alone after the kill, then with replica 1 again.
    alone = [s["step"] for s in steps0 if s["step"] > 10 and s["replicas"] == 1]
    together_again = [s["step"] for s in steps0 if alone and s["step"] > alone[-1] and s["replicas"] == 2]
    assert len(alone) >= 3 and together_again, steps0
    # The restarted replica 1 joined at the current step, not at step 0.
    assert steps1[0]["step"] > 10, steps1[:3]
    assert steps0[-1]["step"] == steps1[-1]["step"] == 100
    assert reports[0]["weights"] == reports[1]["weights"]
    # The Future of a finished collective is complete when wait() returns
    # (torchft chains on it at once); before, its callbacks ran late and
    # torchft's managed work failed an assertion.
    assert "AssertionError" not in logs["replica0"].read_text()
