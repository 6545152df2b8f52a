"""What keeps `journal serve` without a token to this machine and to its own UI: the Host
check (a DNS name rebound to 127.0.0.1), the Origin and Content-Type check (another web page
open in the operator's browser), bodies the parser cannot take, ids, promise bodies, and the
token compared as the bytes the client sent."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import httpx
import pytest

from .serving import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security")
    s = Server(str(tmp / "db"), tmp / "serve.log", "--max-body", "65536", "--allow-host", "journal.internal")
    yield s
    s.stop()


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"type", "message"} and error["message"]
    return error


def _suspended(server: Server, invocation_id: str) -> None:
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "S"}, "id": invocation_id})
    server.wait_status(invocation_id, "suspended")


# -- another web page: Origin and Content-Type ------------------------------------------------


def test_a_text_plain_post_from_another_origin_cannot_approve(server):
    _suspended(server, "csrf-1")
    answer = server.client.post("/invocations/csrf-1/promises/approval", content=b'{"value": true}',
                                headers={"Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert _error(answer, 403)["type"] == "ForeignOrigin"
    answer = server.client.post("/invocations/csrf-1/promises/approval", content=b'{"value": true}',
                                headers={"Content-Type": "text/plain"})
    assert _error(answer, 403)["type"] == "NotJSON"
    assert server.status("csrf-1")["status"] == "suspended"
    assert server.client.get("/invocations/csrf-1/entries").json()["entries"][-1]["kind"] != "promise"


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.2:{port}",
                                    "https://127.0.0.1:{port}", "http://127.0.0.1:1"])
@pytest.mark.parametrize(("path", "body"), [
    ("/invocations", {"handler": "echo", "input": "x", "id": "from-elsewhere"}),
    ("/invocations/csrf-2/promises/approval", {"value": True}),
    ("/invocations/csrf-2/cancel", {}),
])
def test_no_state_changing_request_is_taken_from_another_origin_even_as_json(server, origin, path, body):
    if server.client.get("/invocations/csrf-2").status_code == 404:
        _suspended(server, "csrf-2")
    port = urlsplit(server.url).port
    answer = server.client.post(path, json=body, headers={"Origin": origin.format(port=port)})
    assert _error(answer, 403)["type"] == "ForeignOrigin"
    assert server.client.get("/invocations/from-elsewhere").status_code == 404
    assert server.status("csrf-2")["status"] == "suspended"


def test_the_servers_own_origin_and_programs_without_one_may_act(server):
    own = server.url
    assert server.client.post("/invocations", json={"handler": "echo", "input": "x", "id": "own-origin"},
                              headers={"Origin": own}).status_code == 201
    assert server.client.post("/invocations", json={"handler": "echo", "input": "y", "id": "no-origin"},
                              headers={"Content-Type": "application/json; charset=utf-8"}).status_code == 201
    # Reading needs neither: a page elsewhere cannot read the answer (no CORS headers are sent).
    read = server.client.get("/invocations/own-origin", headers={"Origin": "http://evil.example"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


# -- DNS rebinding: the Host header ---------------------------------------------------------


def _raw_get(server: Server, path: str, host: str) -> tuple[int, bytes]:
    url = urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["attacker.example:{port}", "attacker.example", "127.0.0.2:{port}",
                                  "www.localhost:{port}", "journal.internal.attacker.example"])
def test_a_host_other_than_the_servers_gets_421(server, host):
    _suspended(server, "rebind")
    status, body = _raw_get(server, "/invocations/rebind", host.format(port=urlsplit(server.url).port))
    assert status == 421, body
    assert b'"MisdirectedRequest"' in body and b"--allow-host" in body and b"rebind" not in body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LocalHost", "journal.internal:{port}"])
def test_the_bound_address_localhost_and_allowed_hosts_are_served(server, host):
    status, _ = _raw_get(server, "/healthz", host.format(port=urlsplit(server.url).port))
    assert status == 200


def test_an_allowed_host_must_be_a_host_name(tmp_path):
    from click.testing import CliRunner

    from cli import cli

    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "db"), "--allow-host", "a*b"])
    assert result.exit_code == 2 and "--allow-host 'a*b' is not a host name" in result.stderr


# -- bodies the parser cannot take --------------------------------------------------------------

_ROUTES = ["/invocations", "/invocations/bodies/promises/approval", "/invocations/bodies/cancel"]


def _bodies(limit: int) -> dict[str, bytes]:
    wide_object = b"{" + b",".join(b'"k%d": 0' % n for n in range(5000)) + b"}"
    return {
        "deep array": b"[" * 1000 + b"]" * 1000,
        "deep object": b'{"a":' * 1000 + b"1" + b"}" * 1000,
        "deep under the bound": b'{"handler": "echo", "input": ' + b"[" * 990 + b"]" * 990 + b"}",
        "deep value": b'{"value": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "deep unclosed": b"[" * (limit - 1),
        "brackets in strings": b'{"value": "' + b"[" * 2000 + b'"}',
        "wide array": b"[" + b"0," * (limit // 2 - 2) + b"0]",
        "wide object": wide_object,
        "wide input": b'{"handler": "echo", "input": [' + b"1," * (limit // 2 - 40) + b"1]}",
        "huge": b'{"value": "' + b"x" * limit + b'"}',
        "not UTF-8": b'{"value": "\xff\xfe\xc3\x28"}',
        "latin-1": '{"value": "caf\xe9"}'.encode("latin-1"),
        "lone surrogate": b'{"value": "\\ud800"}',
        "empty": b"",
        "whitespace": b"   ",
        "null": b"null",
        "a number": b"1e999999",
        "NUL byte": b'{"value": "\x00"}',
    }


@pytest.mark.parametrize("path", _ROUTES)
def test_every_body_gets_a_documented_json_error_never_a_500(server, path):
    if server.client.get("/invocations/bodies").status_code == 404:
        _suspended(server, "bodies")
    for what, body in _bodies(65536).items():
        answer = server.client.post(path, content=body)
        assert answer.status_code in (200, 201, 202, 400, 404, 409, 413, 422), (what, answer.status_code, answer.text)
        if answer.status_code >= 400:
            error = _error(answer, answer.status_code)
            assert error["type"], what
    assert "Traceback" not in server.output() and "RecursionError" not in server.output()


def test_a_body_nested_past_the_bound_is_a_400_saying_so(server):
    answer = server.client.post("/invocations", content=b'{"handler": "echo", "input": ' + b"[" * 1000
                                + b"]" * 1000 + b"}")
    error = _error(answer, 400)
    assert error["type"] == "MalformedJSON" and "nests deeper than 100" in error["message"]


# -- ids and promise bodies ---------------------------------------------------------------------


def test_a_nul_in_an_id_is_an_invalid_id_not_a_slash(server):
    server.client.post("/invocations", json={"handler": "echo", "input": "x", "id": "a/b"})
    server.wait_status("a/b", "completed")
    assert server.client.get("/invocations/a%2Fb").status_code == 200
    for path in ("/invocations/a%00b", "/invocations/a%00b/result", "/invocations/a%2Fb%00/entries"):
        assert _error(server.client.get(path), 400)["type"] == "InvalidId"


def test_a_promise_body_with_both_a_value_and_a_rejection_is_a_400(server):
    _suspended(server, "both")
    error = _error(server.client.post("/invocations/both/promises/approval", json={"value": True, "reject": "no"}),
                   400)
    assert error["type"] == "AmbiguousBody"
    assert server.status("both")["status"] == "suspended"
    assert server.client.post("/invocations/both/promises/approval", json={"reject": "no"}).status_code == 200


# -- the token as bytes ---------------------------------------------------------------------------


def test_a_utf8_token_from_a_file_matches_when_the_client_sends_it_as_utf8(tmp_path):
    token = "clé-🔑-jeton"
    (tmp_path / "token").write_text(token + "\n", encoding="utf-8")
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", "--token-file", str(tmp_path / "token"), token=token)
    try:
        def get(value: bytes) -> int:
            return httpx.get(s.url + "/invocations", headers={"Authorization": b"Bearer " + value}).status_code

        assert get(token.encode("utf-8")) == 200
        assert get(token.encode("utf-8")[:-1]) == 401
        assert get(token.encode("utf-8").replace(b"\xc3\xa9", b"\xe9")) == 401  # é as latin-1: other bytes
        assert get(b"cl\xc3\xa9-x") == 401
    finally:
        s.stop()
