"""An analysis worker does not outlive the TensorBoard that started it."""

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT

PARENT = r"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "from tb_attention_plugin.server.worker import _exit_with_parent as watch; import time; "
    "watch(0.1); time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.split()[1:2] == ["Z"] for line in f if line.startswith("State:"))
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_worker_exits_when_its_parent_is_killed():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    try:
        child = int(parent.stdout.readline())
        time.sleep(0.5)
        assert not _gone(child)  # busy (sleeping) while its parent lives
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(child)
    finally:
        parent.kill()
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass
