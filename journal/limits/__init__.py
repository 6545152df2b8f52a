"""Limits kept in the store: rules (concurrency, requests and tokens per period, exact names
and `PREFIX:*`), who holds and who waits for a unit, and pauses a provider asked for. Every
process sharing the store obeys them together (`Store.limits()`); waiting and push-back are
the runtime's (`runtime/_flow/_limits/`). Budgets (`BudgetBook`): allowances of tokens and cost
per scope, and the usage charged to them, in the store's durable tables."""

from ._budgets import PROMISE_PREFIX as BUDGET_PROMISE_PREFIX
from ._budgets import BudgetBook as BudgetBook
from ._budgets import BudgetRule as BudgetRule
from ._budgets import BudgetView as BudgetView
from ._budgets import check_rule as check_budget
from ._budgets import check_scope as check_scope
from ._budgets import promise_name as budget_promise
from ._budgets import wake_waiters as wake_budget_waiters
from ._logic import LIMIT_TABLES as LIMIT_TABLES
from ._logic import Request as Request
from ._model import Blocked as Blocked
from ._model import Granted as Granted
from ._model import LimitError as LimitError
from ._model import LimitRule as LimitRule
from ._model import LimitView as LimitView
from ._model import Window as Window
from ._model import check_name as check_name
from ._model import parse_window as parse_window
from ._model import period_text as period_text
from ._table import LimitTable as LimitTable
from ._table import MemoryLimits as MemoryLimits

__all__ = ("LIMIT_TABLES", "Request", "Blocked", "Granted", "LimitError", "LimitRule", "LimitView", "Window",
           "parse_window", "period_text", "check_name", "LimitTable", "MemoryLimits",
           "BUDGET_PROMISE_PREFIX", "BudgetBook", "BudgetRule", "BudgetView", "check_budget", "check_scope",
           "budget_promise", "wake_budget_waiters")
