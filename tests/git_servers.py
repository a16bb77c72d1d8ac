"""Real git servers on 127.0.0.1 for the git source's tests, and upstream repositories.

- ``SmartHttpServer``: ``git http-backend`` (git's own smart-HTTP CGI program) behind a
  small ``http.server`` that checks a token in HTTP Basic or Bearer authentication.
- ``SshServer``: Debian's OpenSSH ``sshd`` on a free port with a host key and an
  authorized client key generated here.
- ``Upstream``: a working repository whose commits carry fixed dates, pushed to a bare
  repository that both servers serve.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest

#: The test's own git commands ignore the user's git configuration too.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
}


def git(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    full = {**os.environ, **_GIT_ENV, **(env or {})}
    done = subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


class Upstream:
    """``work`` is where the test edits and commits; ``bare`` is what servers serve."""

    def __init__(self, root: Path) -> None:
        self.work = root / "work"
        self.bare = root / "served" / "runbooks.git"
        self.work.mkdir(parents=True)
        git("init", "--quiet", "--initial-branch=main", cwd=self.work)
        git("init", "--quiet", "--bare", "--initial-branch=main", str(self.bare), cwd=root)
        # Partial clone needs the server to accept object filters.
        git("config", "uploadpack.allowFilter", "true", cwd=self.bare)
        git("remote", "add", "origin", str(self.bare), cwd=self.work)

    def write(self, relative: str, content: str | bytes) -> None:
        path = self.work / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    def commit(self, message: str, when: datetime) -> str:
        stamp = when.isoformat()
        git("add", "--all", cwd=self.work)
        env = {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        git("commit", "--quiet", "--allow-empty", "-m", message, cwd=self.work, env=env)
        return git("rev-parse", "HEAD", cwd=self.work)

    def push(self, *, force: bool = False) -> None:
        git("push", "--quiet", *(["--force"] if force else []), "origin", "main", cwd=self.work)

    def blob(self, relative: str) -> str:
        return git("rev-parse", f"HEAD:{relative}", cwd=self.work)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- smart HTTP ------------------------------------------------------------------------


@dataclass
class SmartHttpServer:
    project_root: Path
    token: str | None
    port: int = 0
    #: Every request's path and headers, for asserting what the client sent.
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    def url(self, repo: str = "runbooks.git") -> str:
        return f"http://127.0.0.1:{self.port}/{repo}"

    def start(self) -> SmartHttpServer:
        handler = _handler_for(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def authorised(self, header: str | None) -> bool:
        if self.token is None:
            return True
        if header is None:
            return False
        kind, _, value = header.partition(" ")
        if kind.lower() == "bearer":
            return value == self.token
        if kind.lower() == "basic":
            _, _, password = base64.b64decode(value).decode().partition(":")
            return password == self.token
        return False


def _handler_for(server: SmartHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            self._cgi()

        def do_POST(self) -> None:
            self._cgi()

        def _cgi(self) -> None:
            server.requests.append((self.path, dict(self.headers.items())))
            if not server.authorised(self.headers.get("Authorization")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="lore-test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = self._body()
            path, _, query = self.path.partition("?")
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": str(server.project_root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "REQUEST_METHOD": self.command,
                "PATH_INFO": unquote(path),
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": "127.0.0.1",
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            }
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status, headers = 200, []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in ("content-length", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while size := int(self.rfile.readline().strip() or b"0", 16):
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(parts)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    return Handler


# -- ssh -------------------------------------------------------------------------------

SSHD = Path("/usr/sbin/sshd")


@dataclass
class SshServer:
    root: Path
    port: int
    client_key: Path
    host_public_key: str
    user: str
    process: subprocess.Popen[bytes]

    def url(self, bare: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{bare}"

    def known_hosts_line(self, public_key: str | None = None) -> str:
        kind, blob = (public_key or self.host_public_key).split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}\n"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lore-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.with_suffix(".pub").read_text()


def start_sshd(root: Path, *, protocol_v2: bool = True) -> SshServer:
    """sshd on 127.0.0.1; skipped with a reason where it is not installed, except under
    CI=true, where a missing sshd is a broken test machine and fails. ``protocol_v2``:
    pass the client's GIT_PROTOCOL through (as GitHub and GitLab do); Debian's default
    configuration does not, which leaves git on protocol v0."""
    if not SSHD.exists() or shutil.which("ssh") is None:
        reason = "OpenSSH server not installed (apt-get install -y openssh-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must provide it")
        pytest.skip(reason)
    root.mkdir(parents=True, exist_ok=True)
    host_public = keygen(root / "host_key")
    keygen(root / "client_key")
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    port = free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nAllowUsers {user}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n"
        + ("AcceptEnv GIT_PROTOCOL\n" if protocol_v2 else "")
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    process = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode() if process.stderr else ""
            pytest.fail(f"sshd exited: {error}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                if probe.recv(64).startswith(b"SSH-"):
                    break
        except OSError:
            time.sleep(0.1)
    else:
        process.terminate()
        pytest.fail("sshd did not start listening")
    return SshServer(root, port, root / "client_key", host_public, user, process)
