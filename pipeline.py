"""Entry point: ``python pipeline.py --cuda 9.0 --py 3.6`` (see README.md)."""

import sys

try:
    from torchbuild.commands.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the modules, before anything has started
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
