"""Finding the exceptions inside nested exception groups."""

from runtime._replay._groups import leaves


def test_a_plain_exception_is_its_own_only_leaf():
    error = ValueError("x")
    assert leaves(error) == [error]


def test_the_leaves_of_nested_groups_come_depth_first_in_order():
    a, b, c, d = ValueError("a"), KeyError("b"), KeyboardInterrupt(), TypeError("d")
    group = BaseExceptionGroup("outer", [a, BaseExceptionGroup("inner", [b, ExceptionGroup("deep", [TypeError("e")]), c]), d])
    found = leaves(group)
    assert found[:2] == [a, b] and isinstance(found[2], TypeError) and str(found[2]) == "e"
    assert found[3:] == [c, d]
