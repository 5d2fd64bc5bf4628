"""Run a command and report the peak memory of its whole process group (driver, Ray, actors).

Usage: python benchmarks/peak_memory.py -- fedgs simulate --num-clients 1000 ...
Prints the command's own output, then one line: peak RSS summed over every process in the
group, sampled every 0.5 s (RSS counts shared pages once per process: an upper bound).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def group_rss_bytes(pgid: int) -> int:
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 of /proc/PID/stat: process group
                total += int(fields[21]) * PAGE  # field 24: resident pages
        except (OSError, IndexError, ValueError):
            continue
    return total


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    started = time.monotonic()
    process = subprocess.Popen(command, start_new_session=True)
    peak = 0
    while process.poll() is None:
        peak = max(peak, group_rss_bytes(process.pid))
        time.sleep(0.5)
    print(
        f"peak memory (all processes): {peak / 2**30:.2f} GiB; "
        f"wall {time.monotonic() - started:.0f} s; exit {process.returncode}"
    )
    return process.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
