"""A command run as a person runs it at a terminal: its standard output and error on a
pseudo-terminal (pty) of 100 columns, everything it draws read back as bytes."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from tests.support.server import ROOT


def at_a_terminal(env: dict[str, str], *args: str, timeout: float = 300) -> tuple[int, bytes]:
    """`engram <args>` with both outputs on a pty: its exit code and what the terminal showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, stdout=follower, stderr=follower
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown += chunk
    code = process.wait(timeout=timeout)
    os.close(leader)
    return code, shown
