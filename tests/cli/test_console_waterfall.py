"""The waterfall draws each step from its own start: a retry's first live step is not drawn
from the original run's commit, and a wait (for an approval, between a run and its retry) is
a labelled gap, not the scale that squeezes every step to a sliver. In headless Chromium."""

from __future__ import annotations

import re
import time

import pytest

from .serving import Server, wait_for
from .test_serve_console import Refusals, _finished, _watched
from .test_serve_ui import browser, expect  # noqa: F401


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("waterfall")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    yield s
    s.stop()


@pytest.fixture
def page(browser, server):  # noqa: F811
    yield from _watched(browser, server, Refusals())


def _time_passes(seconds: float) -> None:
    """Until the wall clock is `seconds` later: the wait the test is about, not a guess at timing."""
    until = time.time() + seconds
    wait_for(lambda: time.time() >= until, timeout=seconds + 5, what=f"{seconds} s to pass")


def _ms(label: str) -> float:
    found = re.match(r"(\d+(?:\.\d+)?) (ms|s|min)", label)
    assert found, label
    value, unit = float(found.group(1)), found.group(2)
    return value * {"ms": 1, "s": 1000, "min": 60000}[unit]


def _cut_wait(page) -> None:
    """The waterfall's axis leaves the 2.5 s wait out, and a labelled gap stands for it."""
    gap = page.locator("#waterfall .gap-label")
    expect(gap).to_have_count(1)
    assert _ms(gap.inner_text().lstrip("⋯ ")) >= 2400, gap.inner_text()
    axis_end = page.locator("#waterfall .axis .ticks span").nth(1).inner_text()
    assert _ms(axis_end) < 2400, axis_end  # (it was the whole time, wait included)


def test_a_retrys_live_step_is_drawn_from_its_own_start_and_the_wait_before_it_is_a_gap(page, server, tmp_path):
    marker = tmp_path / "fixed"
    server.client.post("/invocations", json={"handler": "checkout", "input": str(marker), "id": "wf-rt"})
    assert _finished(server, "wf-rt")["status"] == "failed"
    _time_passes(2.5)  # the operator fixes the card, then retries
    marker.write_text("the card works now")
    retry = server.client.post("/invocations/wf-rt/retry").json()["id"]
    assert _finished(server, retry)["status"] == "completed"
    page.goto(server.url + "/i/" + retry)
    lanes = page.locator("#waterfall .lane")
    expect(lanes).to_have_count(2)
    charge = lanes.nth(1)
    expect(charge).to_have_attribute("data-step", "charge")
    assert _ms(charge.locator(".bar-label").inner_text()) < 2000, charge.locator(".bar-label").inner_text()
    # The 2.5 s between the run and its retry is cut and labelled: the axis is the time steps ran.
    _cut_wait(page)


def test_a_step_after_a_long_wait_for_approval_is_not_squeezed_by_it(page, server):
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "WF-2"}, "id": "wf-wait"})
    server.wait_status("wf-wait", "suspended")
    _time_passes(2.5)  # nobody approves for a while
    server.client.post("/invocations/wf-wait/promises/approval", json={"value": True})
    assert _finished(server, "wf-wait")["status"] == "completed"
    page.goto(server.url + "/i/wf-wait")
    lanes = page.locator("#waterfall .lane")
    expect(lanes).to_have_count(2)
    refund = lanes.nth(1)
    expect(refund).to_have_attribute("data-step", "refund")
    assert _ms(refund.locator(".bar-label").inner_text()) < 2000
    _cut_wait(page)
