"""A service's clean stop ends its process at once (chassis/runner.py `exit_without_teardown`), and what an
ordinary exit shows is still shown: every atexit handler runs, logging's flush among them, buffered output
reaches the pipe, and the code is the process's exit status."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import atexit, logging, sys
from thermostat.chassis.runner import exit_without_teardown
logging.basicConfig(stream=sys.stderr, format="%(message)s")
atexit.register(lambda: print("atexit handler ran"))
logging.getLogger("child").warning("a line logged before the exit")
print("buffered, never flushed by the child", end="")  # stdout is a pipe here: block-buffered
exit_without_teardown(3)
print("never printed")
"""


def test_the_exit_runs_atexit_handlers_flushes_the_streams_and_keeps_the_code() -> None:
    ran = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 3
    assert ran.stdout == "buffered, never flushed by the childatexit handler ran\n"
    assert ran.stderr == "a line logged before the exit\n"
