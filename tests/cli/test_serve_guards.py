"""The guards of `journal serve`: what a request may name, who may call, what it may send."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from journal import LmdbStore

from .serving import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guards")
    s = Server(str(tmp / "db"), tmp / "serve.log", "--max-body", "4096")
    yield s
    s.stop()


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"type", "message"} and error["message"]
    return error


def test_a_request_can_only_start_registered_handlers(server, tmp_path):
    for handler in ("tests/cli/cli_agents.py:greet", "os:system", "nope"):
        error = _error(server.client.post("/invocations", json={"handler": handler, "input": "x", "id": "h1"}), 422)
        assert error["type"] == "HandlerNotRegistered" and "approve" in error["message"]
    assert server.client.get("/invocations/h1").status_code == 404  # nothing was created


def test_binding_beyond_loopback_without_a_token_is_refused_at_start_up(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cli", "serve", "--db", str(tmp_path / "db"), "--http", "0.0.0.0:0"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "without a token" in done.stderr and "--token-file" in done.stderr
    assert not (tmp_path / "db").exists()


def test_with_a_token_a_missing_or_wrong_authorization_header_gets_401(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", "--token-file", str(token_file), token="s3cret-token")
    try:
        assert s.client.get("/invocations").status_code == 200
        for headers in ({}, {"Authorization": "Bearer s3cret-tokeX"}, {"Authorization": "Bearer s3cret"},
                        {"Authorization": "Basic s3cret-token"}, {"Authorization": "Bearer"}):
            bare = httpx.Client(base_url=s.url, headers=headers)
            for method, path in (("GET", "/invocations"), ("POST", "/invocations"), ("GET", "/openapi.json"),
                                 ("GET", "/invocations/x/events"), ("POST", "/invocations/x/cancel")):
                response = bare.request(method, path, json={"handler": "echo", "input": "x"})
                assert _error(response, 401)["type"] == "Unauthorized"
                assert response.headers["www-authenticate"] == "Bearer"
            # The UI's shell holds no journal data; it asks for the token itself.
            assert bare.get("/").status_code == 200
            bare.close()
        with LmdbStore(str(tmp_path / "db"), readonly=True) as store:
            assert store.list() == []
    finally:
        s.stop()


def test_a_token_from_the_environment_allows_a_bind_beyond_loopback(tmp_path):
    s = Server(str(tmp_path / "db"), tmp_path / "serve.log", http="0.0.0.0:0", env={"JOURNAL_TOKEN": "env-token"},
               token="env-token")
    try:
        assert s.client.get("/invocations").status_code == 200
        assert httpx.get(s.url + "/invocations").status_code == 401
    finally:
        s.stop()


def test_a_body_over_the_limit_gets_413(server):
    big = {"handler": "echo", "input": "x" * 5000, "id": "big"}
    assert _error(server.client.post("/invocations", json=big), 413)["type"] == "BodyTooLarge"

    def chunks():  # no Content-Length: the limit holds while the body streams in
        yield b'{"handler": "echo", "input": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    assert _error(server.client.post("/invocations", content=chunks()), 413)["type"] == "BodyTooLarge"
    assert server.client.get("/invocations/big").status_code == 404


def test_malformed_json_gets_400_and_a_body_of_the_wrong_shape_422(server):
    post = server.client.post
    assert _error(post("/invocations", content=b'{"handler": '), 400)["type"] == "MalformedJSON"
    assert _error(post("/invocations", content=b"[1, 2]"), 422)["type"] == "InvalidBody"
    assert _error(post("/invocations", json={"input": 1}), 422)["type"] == "InvalidBody"  # no handler
    assert _error(post("/invocations", json={"handler": "echo", "input": 1, "extra": 2}), 422)["type"] == "InvalidBody"
    assert _error(post("/invocations", json={"handler": "echo", "input": 7}), 422)["type"] == "InvalidInput"
    assert _error(post("/invocations", json={"handler": "echo", "input": "x", "durability": "exit"}),
                  422)["type"] == "DurabilityUnavailable"
    assert _error(server.client.get("/invocations", params={"limit": "many"}), 422)["type"] == "InvalidParameter"
    assert _error(server.client.get("/invocations", params={"status": "lost"}), 422)["type"] == "InvalidStatus"
    assert _error(server.client.get("/invocations", params={"cursor": "!!"}), 400)["type"] == "InvalidCursor"


def test_unknown_invocations_and_promises_get_404(server):
    for method, path in (("GET", "/invocations/ghost"), ("GET", "/invocations/ghost/result"),
                         ("GET", "/invocations/ghost/entries"), ("GET", "/invocations/ghost/events"),
                         ("POST", "/invocations/ghost/cancel"), ("POST", "/invocations/ghost/promises/approval")):
        assert _error(server.client.request(method, path, json={"value": 1}), 404)["type"] == "InvocationNotFound"
    server.client.post("/invocations", json={"handler": "approve", "input": {"order": "P"}, "id": "p"})
    server.wait_status("p", "suspended")
    typo = _error(server.client.post("/invocations/p/promises/aproval", json={"value": True}), 404)
    assert typo["type"] == "PromiseNotFound" and "'approval'" in typo["message"]
    assert server.status("p")["status"] == "suspended"
    assert _error(server.client.get("/nowhere"), 404)["type"] == "NotFound"


def test_ids_are_validated_as_the_cli_validates_them(server, tmp_path):
    post = server.client.post
    for bad in ("", "x" * 201, "a\x01b"):
        error = _error(post("/invocations", json={"handler": "echo", "input": "x", "id": bad}), 400)
        assert error["type"] == "InvalidId"
        cli = subprocess.run([sys.executable, "-m", "cli", "run", "tests/cli/cli_agents.py:greet", "--input", '"x"',
                              "--id", bad, "--db", str(tmp_path / "db")], capture_output=True, text=True)
        assert cli.returncode == 2 and error["message"] in cli.stderr
    assert _error(post("/invocations", json={"handler": "echo", "input": "x", "key": "k\x7f"}), 400)["type"] == "InvalidId"
    assert _error(server.client.get("/invocations/" + "x" * 201), 400)["type"] == "InvalidId"
    assert _error(server.client.get("/invocations/a%01b"), 400)["type"] == "InvalidId"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.4", False), ("example.com", False),
])
def test_only_loopback_addresses_count_as_loopback(host, loopback):
    from runtime.http import is_loopback

    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("args", "says"), [
    (["--http", "8420"], "is not HOST:PORT"),
    (["--http", "127.0.0.1:99999"], "is not HOST:PORT"),
    (["--handler", "approve"], "is not of the form path/to/file.py:function"),
    (["--handler", "a:b=tests/cli/serve_agents.py:echo"], "expected NAME=TARGET or TARGET"),
    (["--handler", "a=tests/cli/serve_agents.py:echo", "--handler", "a=tests/cli/serve_agents.py:quick"], "twice"),
    (["--handler", "a=tests/cli/serve_agents.py:nothing"], "has no attribute"),
    (["--token-file", "/nonexistent/token"], "cannot read --token-file"),
])
def test_bad_options_exit_2_saying_what_is_wrong(args, says, tmp_path):
    from click.testing import CliRunner

    from cli import cli

    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "db"), *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr
    assert not (tmp_path / "db").exists()


def test_an_empty_token_file_is_refused(tmp_path):
    from click.testing import CliRunner

    from cli import cli

    (tmp_path / "token").write_text("\n")
    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "db"), "--token-file", str(tmp_path / "token")])
    assert result.exit_code == 2 and "is empty" in result.stderr


def test_a_port_in_use_exits_2_and_creates_no_store(tmp_path):
    import socket

    from click.testing import CliRunner

    from cli import cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "db"), "--http", f"127.0.0.1:{port}"])
    assert result.exit_code == 2 and "cannot listen on 127.0.0.1" in result.stderr
    assert not (tmp_path / "db").exists()
