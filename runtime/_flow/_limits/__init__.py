"""Flow control: steps and invocations under the store's limits (`journal/limits/` keeps the
rules and counters), waiting in line without a thread, a provider's push-back, and the
operator's view (`engine.limits`)."""

from ._pushback import RateLimited as RateLimited
from ._pushback import pushback as pushback

__all__ = ("RateLimited", "pushback")
