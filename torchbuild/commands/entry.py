"""The entry of ``python pipeline.py`` and of the ``torchbuild`` console script: the stopping signals are handled
before anything else is imported (the imports take most of a second), so that a SIGTERM then (a CI job cancelled
as it starts) ends the command saying so, with 128 + the signal, as one later does (host/signals.py), never with the
signal's silent default. Standard library only, until the command line is imported."""

from __future__ import annotations

import signal
import sys
from types import FrameType

HANDLED = ("SIGINT", "SIGTERM", "SIGHUP")  # host/signals.py's, which takes over once the command runs


def main() -> int:
    received: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    for name in HANDLED:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, stop)
    try:
        from torchbuild.commands import cli

        return cli.main()
    except KeyboardInterrupt:  # before the command started (or Ctrl-C while Python loads the modules)
        number = received[-1] if received else signal.SIGINT
        sys.stderr.write(f"interrupted ({signal.Signals(number).name}) before the command started: nothing was run "
                         "or changed\n")  # fmt: skip
        return 128 + number
