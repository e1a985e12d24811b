"""Timing of one whole process, shared by scripts/performance.py and scripts/mocker_compare.py:
wall seconds from launch to exit, the CPU seconds of the process and its children (user +
system, from wait4) and its peak resident memory."""

import os
import subprocess
import sys
import time


def measure(argv, env, what):
    """(wall s, CPU s, peak RSS MB) of running `argv` under `env` with its output discarded;
    exits naming `what` when the process fails."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"{what} failed (status {status})")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
