"""The commands the README and docs/ mark as runnable run as written.

A fenced block preceded by `<!-- runnable -->` is a shell block: each of
its lines runs with bash in the repository root. One preceded by
`<!-- runnable with: LAUNCHER -->` is a script: it is written to a file and
run as `LAUNCHER file`. The environment's python, torchrun and the
installed ucxcoll come first on PATH; torchrun gets a free port
(PET_MASTER_PORT, which torchrun reads as --master-port). Blocks that are
not marked (other hosts, GPUs, CI itself) are listed with how they were
checked in docs/DEVELOPMENT.md."""

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- runnable(?: with: (?P<launcher>[^>]*?))? -->\n```(?P<language>\w*)\n(?P<body>.*?)```", re.S)


def runnable_blocks():
    blocks = []
    for doc in DOCS:
        text = doc.read_text()
        for match in MARKER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append(pytest.param(match.group("launcher"), match.group("body"),
                                       id=f"{doc.relative_to(REPO)}:{line}"))
    return blocks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_docs_mark_runnable_blocks():
    # The README's script, its torchrun command and the environment check.
    assert len(runnable_blocks()) >= 3


@pytest.mark.parametrize("launcher,body", runnable_blocks())
def test_runnable_block_runs_as_written(launcher, body, tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               PET_MASTER_PORT=str(free_port()))
    if launcher:
        script = tmp_path / "block.py"
        script.write_text(body)
        commands = [f"{launcher} {shlex.quote(str(script))}"]
    else:
        commands = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
