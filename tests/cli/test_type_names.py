"""Messages name a user's types as the user wrote them: a class from a handler file by that
file and its name, never by the private module name the file was loaded under."""

import pytest

AGENT = '''
import msgspec
from runtime import Context

class Decision(msgspec.Struct):
    approved: bool

class Order(msgspec.Struct):
    item: str

async def review(ctx: Context, order: Order) -> str:
    decision = await ctx.promise("approval", type=Decision | bool)
    return "ok" if decision is True or getattr(decision, "approved", False) else "no"

async def reads(ctx: Context) -> str:
    return await ctx.run("decide", decide)

def decide() -> "list[Decision] | None":
    return [{"approved": "yes"}]
'''


@pytest.fixture
def agent(tmp_path):
    path = tmp_path / "refunds.py"
    path.write_text(AGENT)
    return str(path)


def test_a_promise_of_the_wrong_type_names_the_users_file_and_class(sh, agent):
    assert sh("run", f"{agent}:review", "--input", '{"item": "book"}', "--id", "r1").returncode == 3
    refused = sh("resolve", "r1", "approval", '"maybe"')  # refused when resolved, by the type it awaits
    assert refused.returncode == 2
    assert "refunds.py:Decision | bool" in refused.stderr, refused.stderr
    assert "_journal_file_" not in refused.stderr


def test_an_input_of_the_wrong_type_names_the_users_file_and_class(sh, agent):
    done = sh("run", f"{agent}:review", "--input", "42")
    assert done.returncode == 2
    assert "input type refunds.py:Order" in done.stderr, done.stderr
    assert "_journal_file_" not in done.stderr


def test_a_step_result_of_the_wrong_type_names_the_users_file_and_class(sh, agent):
    done = sh("run", f"{agent}:reads", "--id", "s1")
    assert done.returncode == 1
    assert "declared type list[refunds.py:Decision] | None" in done.stderr, done.stderr
    assert "_journal_file_" not in sh("show", "s1").stdout
