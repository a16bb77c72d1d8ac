"""Talking to a remote git repository safely: URL checks, the environment git runs in,
and error messages scrubbed of credentials.

lore runs the ``git`` binary rather than a Python git library: partial clone
(``--filter=blob:none``), protocol v2 and smart HTTP and SSH transports with
``GIT_SSH_COMMAND`` are what the source needs, and only git itself has all of them
(dulwich has no partial clone; GitPython shells out to git anyway).

Nothing here trusts the user's own git or ssh setup: the system and global git config are
ignored (an ``insteadOf`` or credential helper there must not change where lore fetches
from, or store its token), ssh reads no ``~/.ssh/config``, offers no agent keys and checks
host keys against lore's own known-hosts file.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import shlex
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr

from lore.errors import ConfigError, SourceError

#: Schemes git may be given; everything else (``file://``, ``ext::``, ``fd::``, local
#: paths) is refused before git sees it, because those run commands or read local files.
ALLOWED_SCHEMES = ("https", "http", "ssh", "git")
#: ``[user@]host:path`` (scp-style ssh). A ``::`` transport such as ``ext::`` never matches,
#: because the host part may not contain ``:`` and the path may not start with ``:``.
_SCP_URL = re.compile(
    r"^(?:(?P<user>[^@/:\s]+)@)?(?P<host>[^@/:\s\[\]]+|\[[0-9a-fA-F:.]+\]):(?P<path>[^:].*)$"
)
#: ``<transport>::<address>``: git hands these to a remote helper (``ext::`` runs a command).
_TRANSPORT_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
#: What HTTP Basic authentication carries as the user name with a token: GitHub, GitLab
#: (personal access tokens), Gitea and Azure DevOps all accept any name with a token.
TOKEN_USER = "x-access-token"
#: Git is given this many seconds of stalled transfer before it gives up (bytes/s below
#: ``http.lowSpeedLimit``), so a hung server cannot hold a sync forever.
_LOW_SPEED_SECONDS = "60"
_SSH_TIMEOUT_SECONDS = "30"
#: No git command of a sync may run longer than this, whatever the transport (git://
#: has no stall timeout of its own).
GIT_COMMAND_TIMEOUT_SECONDS = 1800
#: Inherited environment variables that would change what git does or where it looks.
_DROPPED_ENV_PREFIXES = ("GIT_", "SSH_")


@dataclass(frozen=True, slots=True)
class RemoteUrl:
    url: str
    scheme: str
    host: str
    #: The addresses the host resolved to when it was checked (empty: not checked, or an
    #: address itself). git connects to these and no others over http(s)
    #: (``http.curloptResolve``): a second resolution, rebound to 127.0.0.1 or a metadata
    #: endpoint after the check, is never made.
    addresses: tuple[str, ...] = ()
    port: int | None = None


def parse_remote_url(url: str, *, allow_private_hosts: bool) -> RemoteUrl:
    """The repository URL, checked before git sees it. Raises ConfigError saying why not.

    Refused: option-looking values (``--upload-pack=...``), ``<transport>::`` forms
    (``ext::`` runs a command), ``file://`` and local paths, credentials written into the
    URL (they would land in ``.git/config``; use ``token_env``/``token_file``), and, unless
    ``allow_private_hosts``, loopback, link-local and unspecified addresses (also when a
    host name resolves to one), so a shared config cannot make lore probe the machine it
    runs on or a cloud metadata endpoint.
    """
    text = url.strip()
    if not text or text != url or any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise ConfigError(f"git url {url!r}: empty, or contains whitespace or control characters")
    if text.startswith("-"):
        raise ConfigError(f"git url {url!r}: looks like a command-line option; refused")
    if _TRANSPORT_URL.match(text):
        raise ConfigError(f"git url {url!r}: '<transport>::' URLs (such as ext::) are refused")
    if "://" in text:
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            allowed = ", ".join(f"{name}://" for name in ALLOWED_SCHEMES)
            raise ConfigError(
                f"git url {url!r}: scheme {scheme}:// is refused; use one of {allowed} or user@host:path"
            )
        if parts.password is not None or (scheme in ("http", "https") and parts.username is not None):
            raise ConfigError(
                f"git url {_without_userinfo(text)!r}: credentials in the URL are refused "
                "(they would be stored in the clone's config); use token_env or token_file"
            )
        host = parts.hostname or ""
        if not host or host.startswith("-") or (parts.username or "").startswith("-"):
            raise ConfigError(f"git url {url!r}: no valid host")
        if parts.path.startswith("/-"):
            raise ConfigError(f"git url {url!r}: path looks like a command-line option; refused")
    else:
        match = _SCP_URL.match(text)
        if match is None:
            raise ConfigError(
                f"git url {url!r}: not a remote repository URL (https://, ssh://, git:// or "
                "user@host:path); local paths and file:// are refused"
            )
        scheme, host = "ssh", match["host"].strip("[]")
        if host.startswith("-") or match["path"].startswith("-"):
            raise ConfigError(f"git url {url!r}: looks like a command-line option; refused")
    addresses: tuple[str, ...] = ()
    if not allow_private_hosts:
        addresses = refuse_private_host(url, host)
    port = _port(text, scheme)
    return RemoteUrl(text, scheme, host, addresses, port)


def _port(url: str, scheme: str) -> int | None:
    if scheme not in ("http", "https"):
        return None
    try:
        given = urlsplit(url).port
    except ValueError:
        return None
    return given or (443 if scheme == "https" else 80)


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def refuse_private_host(url: str, host: str) -> tuple[str, ...]:
    """``ConfigError`` when ``host`` is, or resolves to, a loopback, link-local or
    unspecified address (this machine, a cloud metadata endpoint); else the addresses a
    name resolved to (empty for an address, or a name that does not resolve here)."""
    resolved: tuple[str, ...] = ()
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        if host.lower() == "localhost" or host.lower().endswith(".localhost"):
            raise ConfigError(_private_message(url, host)) from None
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            return ()  # unresolvable here: git reports it when it tries to connect
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos}
        resolved = tuple(sorted(str(address) for address in addresses))
    for address in addresses:
        mapped = getattr(address, "ipv4_mapped", None) or address
        if mapped.is_loopback or mapped.is_link_local or mapped.is_unspecified:
            raise ConfigError(_private_message(url, host))
    return resolved


def _private_message(url: str, host: str) -> str:
    return (
        f"git url {url!r}: host {host} is a loopback or link-local address; "
        "set allow_private_hosts = true on the source to allow it"
    )


@dataclass(frozen=True, slots=True)
class GitAuth:
    """How git authenticates to one remote. The token never reaches a command line, a
    URL or the clone's config: it travels as an HTTP header through ``GIT_CONFIG_*``."""

    remote: RemoteUrl
    known_hosts_file: Path
    strict_host_key_checking: bool = True
    ssh_key_file: Path | None = None
    token: str | None = None

    def secrets(self) -> tuple[str, ...]:
        if not self.token:
            return ()
        return (self.token, _basic(self.token))


def _basic(token: str) -> str:
    return base64.b64encode(f"{TOKEN_USER}:{token}".encode()).decode("ascii")


def git_environment(auth: GitAuth) -> dict[str, str]:
    """The environment every git command of a git source runs in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(_DROPPED_ENV_PREFIXES)}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_SSH_COMMAND=ssh_command(auth),
        LC_ALL="C",
    )
    settings: list[tuple[str, str]] = [
        # Only the network transports; ext::, file:// and fd:: stay off even if a URL or
        # a submodule asks for them.
        ("protocol.allow", "never"),
        *((f"protocol.{scheme}.allow", "always") for scheme in ALLOWED_SCHEMES),
        ("credential.helper", ""),  # nothing prompts for, or stores, a password
        ("core.askPass", ""),
        ("http.lowSpeedLimit", "1"),
        ("http.lowSpeedTime", _LOW_SPEED_SECONDS),
        ("transfer.fsckObjects", "true"),
        ("gc.autoDetach", "false"),
        # A redirect would take the fetch (and its Authorization header) to a host that
        # was never checked: refused, as for the first request.
        ("http.followRedirects", "false"),
    ]
    remote = auth.remote
    if remote.addresses and remote.port is not None:
        # Pinned: curl connects to the addresses checked, never to a new answer of DNS.
        pinned = ",".join(f"[{a}]" if ":" in a else a for a in remote.addresses)
        settings.append(("http.curloptResolve", f"{remote.host}:{remote.port}:{pinned}"))
    if auth.token:
        settings.append((f"http.{auth.remote.url}.extraHeader", f"Authorization: Basic {_basic(auth.token)}"))
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for number, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{number}"] = key
        env[f"GIT_CONFIG_VALUE_{number}"] = value
    return env


def ssh_command(auth: GitAuth) -> str:
    """ssh with lore's own known-hosts file and identity, and nothing from ``~/.ssh``."""
    settings = {
        "BatchMode": "yes",
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        # Quoted: ssh splits these values at spaces (several files may be listed).
        "IdentityFile": f'"{auth.ssh_key_file}"' if auth.ssh_key_file else "none",
        "UserKnownHostsFile": f'"{auth.known_hosts_file}"',
        "GlobalKnownHostsFile": os.devnull,
        "StrictHostKeyChecking": "yes" if auth.strict_host_key_checking else "accept-new",
        "UpdateHostKeys": "no",
        "ConnectTimeout": _SSH_TIMEOUT_SECONDS,
        "ServerAliveInterval": "15",
        "ServerAliveCountMax": "4",
    }
    options = ["ssh", "-F", os.devnull]
    for key, value in settings.items():
        options += ["-o", f"{key}={value}"]
    return shlex.join(options)


def scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def run_git(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    secrets: Sequence[str] = (),
    what: str,
    stdin: bytes | None = None,
    ok_codes: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess[bytes]:
    """Run git; a failure raises SourceError with git's last lines of stderr (scrubbed)."""
    try:
        done = subprocess.run(
            ["git", *args],
            input=stdin,
            capture_output=True,
            env=dict(env),
            check=False,
            timeout=GIT_COMMAND_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as err:
        raise SourceError(f"{what}: git did not finish within {GIT_COMMAND_TIMEOUT_SECONDS} s") from err
    except OSError as err:
        raise SourceError(f"{what}: cannot run git: {err.strerror or err}") from err
    if done.returncode not in ok_codes:
        raise SourceError(f"{what}: {git_error(done.stderr, secrets)}")
    return done


def git_error(stderr: bytes, secrets: Sequence[str]) -> str:
    """git's (and ssh's) own words on one line: the first line, which says what went
    wrong first (``REMOTE HOST IDENTIFICATION HAS CHANGED``), and the last two, minus
    progress chatter, decoration and boilerplate."""
    lines = [line.strip(" @\t") for line in stderr.decode("utf-8", "replace").splitlines()]
    useful = [line for line in lines if line and not line.startswith(_CHATTER) and line not in _BOILERPLATE]
    picked = useful if len(useful) <= 3 else [useful[0], *useful[-2:]]
    return scrub("; ".join(picked) or "git failed with no message", secrets)


_CHATTER = ("hint:", "remote: Counting", "remote: Compressing", "remote: Enumerating", "remote: Total")
_BOILERPLATE = frozenset(
    {"Please make sure you have the correct access rights", "and the repository exists."}
)


def read_token(
    token_env: str | None, token_file: Path | None, source: str, value: SecretStr | None = None
) -> str | None:
    """The HTTPS token: the table's own ``token`` value (what a source added over the API
    carries, since there a path or a variable name would read the server's), or from an
    environment variable or a file, read at fetch time so a rotated token is picked up
    without restarting anything."""
    if sum(bool(given) for given in (token_env, token_file, value)) > 1:
        raise ConfigError(f"source {source!r}: set one of token, token_env or token_file")
    if value is not None:
        value_text = value.get_secret_value()
    elif token_env:
        value_text = os.environ.get(token_env) or ""
        if not value_text:
            raise ConfigError(f"source {source!r}: environment variable {token_env} (token_env) is not set")
    elif token_file:
        try:
            value_text = token_file.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(
                f"source {source!r}: cannot read token_file {token_file}: {err.strerror}"
            ) from err
    else:
        return None
    token = value_text.strip()
    if not token or any(ch in token for ch in "\r\n\x00"):
        raise ConfigError(f"source {source!r}: the token is empty or spans several lines")
    return token
