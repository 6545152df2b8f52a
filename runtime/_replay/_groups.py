"""The exceptions inside an exception group, found by the standard library's own traversal."""

from __future__ import annotations


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions that are not groups in `exc`, depth first, in order (`[exc]` for one)."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    found: list[BaseException] = []

    def visit(e: BaseException) -> bool:
        if not isinstance(e, BaseExceptionGroup):
            found.append(e)
        return False

    # `subgroup` asks its condition about every nested group and leaf, in order; answering
    # False for each one makes it visit them all (and keep none).
    exc.subgroup(visit)
    return found
