"""`python -m cli` runs the `journal` command."""

from ._main import main

main()
