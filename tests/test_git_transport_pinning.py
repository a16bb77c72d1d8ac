"""git over http(s) goes where the URL check said, and nowhere else (issue 30): no
redirect is followed, and curl connects to the addresses the check resolved, so a second
DNS answer (rebound to 127.0.0.1 or a metadata endpoint) is never used. Real git against
real loopback HTTP servers."""

from __future__ import annotations

import subprocess
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from git_servers import SmartHttpServer, Upstream
from lore.sources.git_transport import GitAuth, RemoteUrl, git_environment, parse_remote_url


def _ls_remote(auth: GitAuth, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = git_environment(auth)
    return subprocess.run(
        ["git", "ls-remote", auth.remote.url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    repo = Upstream(tmp_path / "upstream")
    repo.write("a.md", "# A\n")
    repo.commit("first", datetime(2026, 1, 1, tzinfo=UTC))
    repo.push()
    return repo


def test_git_connects_to_the_pinned_address_not_a_new_resolution(upstream: Upstream, tmp_path: Path) -> None:
    """``lore-pinned.invalid`` resolves nowhere (RFC 2606): git reaches the loopback
    server only through the pin, which is what the check resolved."""
    server = SmartHttpServer(upstream.bare.parent, token=None).start()
    try:
        url = f"http://lore-pinned.invalid:{server.port}/runbooks.git"
        remote = RemoteUrl(url, "http", "lore-pinned.invalid", ("127.0.0.1",), server.port)
        auth = GitAuth(remote, known_hosts_file=tmp_path / "known_hosts")
        done = _ls_remote(auth, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "refs/heads/main" in done.stdout
        unpinned = GitAuth(RemoteUrl(url, "http", "lore-pinned.invalid"), known_hosts_file=tmp_path / "kh")
        assert _ls_remote(unpinned, tmp_path).returncode != 0  # the look-alike: no pin, no host
    finally:
        server.stop()


def test_the_check_pins_what_it_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    answers = iter([[(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("198.51.100.7", 0))]])
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: next(answers))
    remote = parse_remote_url("https://git.example.com/team/runbooks.git", allow_private_hosts=False)
    env = git_environment(GitAuth(remote, known_hosts_file=Path("/nonexistent")))
    settings = {
        env[f"GIT_CONFIG_KEY_{n}"]: env[f"GIT_CONFIG_VALUE_{n}"] for n in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert settings["http.curloptResolve"] == "git.example.com:443:198.51.100.7"
    assert settings["http.followRedirects"] == "false"


def test_a_redirect_is_not_followed(upstream: Upstream, tmp_path: Path) -> None:
    target = SmartHttpServer(upstream.bare.parent, token=None).start()

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{target.port}{self.path}")
            self.end_headers()

    redirector = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=redirector.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{redirector.server_address[1]}/runbooks.git"
        auth = GitAuth(parse_remote_url(url, allow_private_hosts=True), known_hosts_file=tmp_path / "kh")
        done = _ls_remote(auth, tmp_path)
        assert done.returncode != 0
        assert target.requests == []  # the redirect's target was never asked
        direct = GitAuth(
            parse_remote_url(target.url(), allow_private_hosts=True), known_hosts_file=tmp_path / "kh"
        )
        assert _ls_remote(direct, tmp_path).returncode == 0  # the look-alike: no redirect, fetched
    finally:
        redirector.shutdown()
        redirector.server_close()
        target.stop()
