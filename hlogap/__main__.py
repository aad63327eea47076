"""`python -m hlogap` runs the CLI."""

from hlogap.cli import main

main()
