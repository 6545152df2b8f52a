"""The console's files as `journal serve` serves them: ES modules (a browser runs a module only
when it comes with a JavaScript type), allowed by the page's Content-Security-Policy, every
import found on the server, and no module that writes markup (journal contents are hostile)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .serving import Server

STATIC = Path(__file__).parents[2] / "runtime" / "http" / "static"
MODULES = sorted(path.relative_to(STATIC).as_posix() for path in STATIC.rglob("*.js"))
IMPORT = re.compile(r'^import\s[^;]*?from\s+"([^"]+)";', re.M)
# What would turn a string into markup or code: the console builds its DOM with `h` (text nodes only).
MARKUP = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|DOMParser"
                    r"|createContextualFragment|srcdoc|setHTML")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-files")
    s = Server(str(tmp / "db"), tmp / "serve.log")
    yield s
    s.stop()


def test_the_page_loads_the_router_as_a_module_under_a_policy_that_allows_only_this_server(server):
    shell = server.client.get("/")
    assert shell.status_code == 200
    assert '<script type="module" src="/static/app.js"></script>' in shell.text
    policy = dict(part.strip().split(" ", 1) for part in shell.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'self'" and "script-src" not in policy
    assert shell.headers["x-content-type-options"] == "nosniff"


def test_the_console_is_several_modules():
    assert {"app.js", "common.js", "pages/list.js", "pages/invocation.js", "pages/key.js",
            "pages/schedules.js"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_each_module_is_served_as_javascript_and_its_imports_are_there(server, module):
    answer = server.client.get("/static/" + module)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/javascript; charset=utf-8"
    assert answer.text == (STATIC / module).read_text(encoding="utf-8")
    for target in IMPORT.findall(answer.text):
        assert target.startswith("./") or target.startswith("../"), target  # this server's files only
        found = (STATIC / module).parent.joinpath(target).resolve()
        assert found.is_relative_to(STATIC.resolve()) and found.is_file(), f"{module} imports {target}"


@pytest.mark.parametrize("module", MODULES)
def test_no_module_writes_markup(module):
    assert MARKUP.findall((STATIC / module).read_text(encoding="utf-8")) == []
