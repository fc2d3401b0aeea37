"""Entry point: ``python pipeline.py --cuda 9.0 --py 3.6`` (see README.md)."""

import sys

from torchbuild.commands.entry import main

if __name__ == "__main__":
    sys.exit(main())
