"""Drives an `agentrt` command (chat, work) on a pseudo-terminal for the CLI tests (pexpect)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pexpect  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]


class Terminal:
    """One ``python -m agentrt.cli SUBCOMMAND ARGS`` process; `prompt_pattern` is a regex of its prompt."""

    def __init__(self, env: dict[str, str], subcommand: str, *args: str, prompt_pattern: str) -> None:
        self.prompt_pattern = prompt_pattern
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "agentrt.cli", subcommand, *args],
            env=env,
            cwd=str(ROOT),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        self.transcript = io.StringIO()
        self.child.logfile_read = self.transcript

    def expect(self, pattern: str) -> str:
        self.child.expect(pattern)
        return str(self.child.before)

    def prompt(self) -> str:
        """Everything printed up to the next prompt."""
        return self.expect(self.prompt_pattern)

    @property
    def last_prompt(self) -> str:
        return str(self.child.after)

    def say(self, line: str) -> str:
        """Send a line and return the output up to the next prompt."""
        self.child.sendline(line)
        return self.prompt()

    def interrupt(self, pattern: str) -> str:
        """Press Ctrl-C until `pattern` shows up.

        A Ctrl-C that lands while input() is still setting up the terminal is only noticed at the
        next signal (the same race as in Python's own REPL), so a press without effect is repeated.
        """
        for _ in range(20):
            if self.child.isalive():
                self.child.sendintr()
            found = self.child.expect([pattern, pexpect.TIMEOUT, pexpect.EOF], timeout=0.5)
            if found == 0:
                return str(self.child.before)
            if found == 2:  # a repeated press quit the command: what it printed before ending still counts
                before = str(self.child.before)
                if re.search(pattern, before):
                    return before
                raise AssertionError(f"the command ended without printing {pattern!r}: {before[-300:]!r}")
        raise AssertionError(f"Ctrl-C never produced {pattern!r}")

    def exit(self) -> int:
        self.child.sendline("/exit")
        self.child.expect(pexpect.EOF)
        self.child.close()
        return int(self.child.exitstatus)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
