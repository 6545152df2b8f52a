"""The `journal` command: parses arguments, calls `runtime` and `journal`, renders the results.

Run `journal --help`; docs/cli.md describes every command and its `--json` shape.
"""

from ._main import cli as cli
from ._main import main as main

__all__ = ("cli", "main")
