"""Starts N rank processes on this machine and collects what they report.

Starting a Python process that imports torch costs seconds on our 2-core
machines, so each (check module, world size) is started once and runs every
check of the module (rank_main.py); the pytest tests then only read the
results.
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def free_port() -> int:
    """A port for a store that is free now and stays free until the store
    binds it: below the kernel's ephemeral range (32768-60999 by default),
    where UCX's listeners and every bind to port 0 take theirs, so that the
    ranks of a test running meanwhile cannot take it first (seen:
    EADDRINUSE)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def run_processes(commands, timeout: float, env=None):
    """Runs the commands in parallel; returns [(returncode, output)]. Kills
    every process still running at the timeout (a hang is a failure),
    with whatever they started: each command runs in a process group of
    its own, since a process it forked (a scenario forks children) keeps
    the output pipe open after the command itself has exited."""
    env = dict(env or os.environ, PYTHONFAULTHANDLER="1")
    procs = [
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
            start_new_session=True,
        )
        for cmd in commands
    ]
    results = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGABRT first: Python's faulthandler (PYTHONFAULTHANDLER, set
            # above) prints every thread's stack, so a hang says where.
            for other in procs:
                if other.poll() is None:
                    try:
                        other.send_signal(signal.SIGABRT)
                    except ProcessLookupError:
                        pass
            time.sleep(1.0)
            for other in procs:
                try:
                    os.killpg(other.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            output, _ = proc.communicate()
            output += f"\n[harness] killed after {timeout} s: hang"
            proc.returncode = -9
        results.append((proc.returncode, output))
    return results


def run_reporting_ranks(script: str, name: str, world: int, timeout: float, outputs: list | None = None,
                        hosts: "SimulatedHosts | None" = None, **env):
    """Runs `script NAME RANK WORLD PORT WORKDIR` on `world` ranks, with
    `env` added to the environment, and returns each rank's report (its
    last "RESULT <json>" line); asserts that every rank exited cleanly.
    Each rank's whole output is appended to `outputs` if given. With
    `hosts`, the ranks are spread over the simulated hosts in blocks."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"ucxcoll-{name}-") as workdir:
        commands = [
            [sys.executable, str(HERE / script), name, str(rank), str(world), str(port), workdir]
            for rank in range(world)
        ]
        if hosts is not None:
            commands, host_env = hosts.place(commands)
            env = dict(host_env, **env)
        results = run_processes(commands, timeout, env=dict(os.environ, **env))
    reports = []
    for rank, (code, output) in enumerate(results):
        assert code == 0, f"rank {rank} of {name} exited with {code}:\n{output[-4000:]}"
        if outputs is not None:
            outputs.append(output)
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        assert lines, f"rank {rank} of {name} reported nothing:\n{output[-4000:]}"
        # raw_decode: another thread's stderr (torch's flight recorder says
        # it is dumping a trace when a collective fails) may land on the
        # same line after the report.
        reports.append(json.JSONDecoder().raw_decode(lines[-1][len("RESULT ") :])[0])
    return reports


class RankRun:
    """The reports of one check module's rank processes at one world size."""

    def __init__(self, module: str, world: int, timeout: float = 900, hosts: "SimulatedHosts | None" = None,
                 extra_env: "dict | None" = None):
        """With `hosts`, the ranks are spread over the simulated hosts in
        blocks (ranks 0..k-1 on host 0, and so on), as torchrun places them.
        `extra_env` is added to every rank's environment."""
        self.world = world
        with tempfile.TemporaryDirectory(prefix=f"ucxcoll-{module}-w{world}-") as outdir:
            port = free_port()
            commands = [
                [sys.executable, str(HERE / "rank_main.py"), module, str(rank), str(world), str(port), outdir]
                for rank in range(world)
            ]
            env = dict(os.environ, **extra_env) if extra_env else None
            if hosts is not None:
                commands, host_env = hosts.place(commands)
                env = dict(env or os.environ, **host_env)
            self.processes = run_processes(commands, timeout, env=env)
            self.reports = {}
            for rank in range(world):
                path = Path(outdir) / f"rank{rank}.json"
                if path.exists():
                    self.reports[rank] = json.loads(path.read_text())

    def diagnostics(self) -> str:
        return "\n".join(
            f"--- rank {rank}: exit code {code}\n{output[-4000:]}" for rank, (code, output) in enumerate(self.processes)
        )

    def outcome(self, check: str):
        """('passed'|'skipped'|'failed', details)."""
        if len(self.reports) != self.world:
            return "failed", "not every rank reported:\n" + self.diagnostics()
        statuses = {rank: report.get(check, {"status": "failed", "error": "not run"}) for rank, report in self.reports.items()}
        failed = {rank: s for rank, s in statuses.items() if s["status"] == "failed"}
        if failed:
            return "failed", "\n".join(f"rank {rank}:\n{s.get('error')}" for rank, s in failed.items())
        if all(s["status"] == "skipped" for s in statuses.values()):
            return "skipped", statuses[0]["reason"]
        return "passed", ""


class SimulatedHosts:
    """Hosts made by scripts/hosts.sh (network namespaces joined by a
    bridge; see there) for tests across hosts. The rig is named after this
    process, so that a later run removes what a killed one left behind."""

    SCRIPT = REPO / "scripts" / "hosts.sh"

    def __init__(self, count: int):
        self.count = count
        self.rig = f"ucxh{os.getpid()}"
        self.remove_abandoned_rigs()
        subprocess.run([str(self.SCRIPT), "up", str(count), self.rig], check=True, capture_output=True, text=True)

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why hosts cannot be made here, or None."""
        probe = subprocess.run([str(cls.SCRIPT), "check"], capture_output=True, text=True)
        return None if probe.returncode == 0 else (probe.stdout + probe.stderr).strip()

    @classmethod
    def remove_abandoned_rigs(cls) -> None:
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("ucxh") and name.endswith("-sw") and name[4:-3].isdigit():
                if not Path(f"/proc/{name[4:-3]}").exists():
                    subprocess.run([str(cls.SCRIPT), "down", name[:-3]], capture_output=True)

    def address(self, host: int) -> str:
        return f"10.231.0.{host + 1}"

    def command(self, host: int, command: list[str]) -> list[str]:
        return [str(self.SCRIPT), "run", str(host), self.rig, "--", *command]

    def place(self, commands: list[list[str]]) -> tuple[list[list[str]], dict[str, str]]:
        """Rank r's command (commands[r]) on its host, in blocks as torchrun
        places ranks (0..k-1 on host 0, ...), and the environment they need."""
        world = len(commands)
        per_host = -(-world // self.count)
        placed = [self.command(rank // per_host, command) for rank, command in enumerate(commands)]
        return placed, self.environment(world, per_host)

    def environment(self, world: int, per_host: int) -> dict[str, str]:
        # What torchrun would set on each host, and gloo's interface (a
        # host's name resolves to nothing in the rig).
        return {
            "UCXCOLL_TEST_STORE_ADDR": self.address(0),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(per_host),
            "GLOO_SOCKET_IFNAME": "eth0",
        }

    def add_extras(self, host: int) -> None:
        """docker0 (172.17.0.1 on every host) and eth1 (reaching no other
        host) on host `host`: see scripts/hosts.sh."""
        subprocess.run([str(self.SCRIPT), "extras", str(host), self.rig], check=True)

    def readdress(self, host: int, device: str, address: str) -> None:
        """Host `host`'s `device` gets `address` ("a.b.c.d/prefix") instead."""
        subprocess.run([str(self.SCRIPT), "readdress", str(host), device, address, self.rig], check=True)

    def add_rail(self, host: int) -> None:
        """A second link for host `host`, eth2 (10.232.0.(host+1)), on a
        second switch: see scripts/hosts.sh."""
        subprocess.run([str(self.SCRIPT), "rail", str(host), self.rig], check=True)

    def remove_rail(self, host: int) -> None:
        subprocess.run([str(self.SCRIPT), "unrail", str(host), self.rig], check=True)

    def shape(self, host: int, rate: str) -> None:
        """Every link of host `host` limited to `rate` each way ("100mbit")."""
        subprocess.run([str(self.SCRIPT), "shape", str(host), rate, self.rig], check=True)

    def unshape(self, host: int) -> None:
        subprocess.run([str(self.SCRIPT), "unshape", str(host), self.rig], check=True)

    def cut(self, host: int) -> None:
        subprocess.run([str(self.SCRIPT), "cut", str(host), self.rig], check=True)

    def heal(self, host: int) -> None:
        subprocess.run([str(self.SCRIPT), "heal", str(host), self.rig], check=True)

    def close(self) -> None:
        subprocess.run([str(self.SCRIPT), "down", self.rig], capture_output=True)
