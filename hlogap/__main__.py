"""`python -m hlogap` runs the CLI."""

import sys

try:
    from hlogap.cli import run
except KeyboardInterrupt:  # interrupted while starting up: the contract's code and one line
    sys.stderr.write("hlogap: interrupted\n")
    sys.exit(130)

run()
