"""The `journal` command."""


def main() -> None:
    raise SystemExit("not yet")
