"""One credential-context grammar: where a credential sits, format by format, as a table.

A credential is found by its context far more often than by its shape: a key that names
it (``password``, ``token``), a flag that takes it (``-P``, ``--passphrase``), a slot of
a file format that holds it (the fifth field of ``.pgpass``, ``password`` after
``login`` in ``.netrc``). So the grammar has three parts, and a new format is a row:

- the VOCABULARY (``CREDENTIAL_NAME``, ``SHORT_NAME``, ``HEADER_NAME``, ``PARAM_NAME``):
  the words that name a credential, written once;
- the LAYOUTS (``FORMATS``): one row per format, a template in which ``{name}``,
  ``{value}``, ``{sep}`` and friends stand for the vocabulary, the value forms and the
  separators, plus the policy that accepts a value (any non-placeholder under a strong
  name; a password's shape under a short or weak one; a base64 ``user:pass``);
- the FLAGS (``CLI_FLAGS``): which command takes its secret in which flag, as rows of
  (commands, flag); generic long flags need no command.

Blocks that no single regex reads (a Markdown table, whose key is in the header row; a
Kubernetes Secret's ``stringData``; a bare token on the output line of a command that
prints a credential; a value continued onto the next line with ``\\``) are block rules
here too, each a small function over lines. They replace only the value, keeping the key,
the flag and the layout, as every lore rule does.

Written here, not taken from a library: the detectors measured (``bench/secret_detectors.py``)
find credentials by vendor format and by ``key = value`` in code; none reads ``.netrc``,
``.pgpass``, a table's header, a Secret's ``stringData`` or a command's output line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from lore.safety.lazy_regex import compile_later
from lore.safety.secret_rules import PatternRule, group, keyed
from lore.safety.secret_shapes import decode_base64, is_placeholder, is_resource_name, looks_random, redacted

# -- the vocabulary -------------------------------------------------------------------------

#: Words that name a credential whatever its value looks like.
CREDENTIAL_NAME = (
    r"password|passwd|passphrase|passcode|pwd|secret|token|api[_\-. ]?key|apikey|private[_\-. ]?key"
    r"|access[_\-. ]?key|secret[_\-. ]?key|client[_\-. ]?secret|credentials?|auth[_\-. ]?token"
)
#: Short names, credentials only when the value has a password's shape (``pass: x9!Lm``).
SHORT_NAME = r"pass|pw|pword|passw"
#: HTTP headers that carry a credential, with or without a scheme.
HEADER_NAME = (
    r"(?:proxy-)?authorization|private-token|x-[a-z0-9\-]*(?:token|api-?key|auth|secret|password)[a-z0-9\-]*"
    r"|api-?key|x-api-key"
)
#: URL and DSN query parameters whose value is the credential itself (not
#: ``X-Goog-Credential``/``X-Amz-Credential``: a key id or an account's e-mail and a date).
PARAM_NAME = (
    r"password|passwd|pwd|pass|secret|client_secret|token|access_token|refresh_token|id_token|api_?key"
    r"|apikey|sig|signature|x-amz-signature|x-amz-security-token|x-goog-signature"
    r"|auth|authtoken|sharedaccesskey|accountkey"
)

#: A value: quoted, or bare up to a blank, a quote or a shell separator; a ``\\`` that
#: continues the line is not part of it (``continuation`` takes the next line).
VALUE = (
    r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|`(?P<bq>[^`\n]+)`"""
    r"""|(?P<bare>(?=[^\s"'`&;|])[^\s"'`&;|\\]*(?:\\(?!\r?\n)[^\s"'`&;|\\]*)*))"""
)
#: The value of an output line or a table cell: one token.
_TOKEN = r"[^\s|`'\"]+"

# -- value policies ---------------------------------------------------------------------------


def any_value(value: str) -> bool:
    return True


def password_shaped(value: str) -> bool:
    """A value a person chose as a password: letters with a digit or a symbol, or random."""
    if len(value) < 6 or len(value.split()) > 1 or is_resource_name(value):
        return False
    has_letter = bool(re.search(r"[^\W\d_]", value))
    has_other = bool(re.search(r"\d|[^\w\s.\-/]", value))
    chosen = has_letter and has_other and not value.startswith(("/", "http"))
    return chosen or looks_random(value, min_length=12)


def token_shaped(value: str) -> bool:
    """A value long and mixed enough to be a generated token, not a name or a number."""
    if len(value) < 8 or is_resource_name(value):
        return False
    return password_shaped(value) or looks_random(value, min_length=16)


def basic_credentials(value: str) -> bool:
    """Base64 of ``user:password`` (a docker ``auths`` entry, a Basic header)."""
    decoded = decode_base64(value)
    return ":" in decoded and decoded.isprintable() and not decoded.endswith(":")


# -- the layouts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    """One row: a layout template and what a value in it must look like."""

    name: str
    #: A regex with ``{name}`` (CREDENTIAL_NAME), ``{short}``, ``{header}``, ``{param}``,
    #: ``{value}`` (VALUE's named forms) or a ``(?P<value>…)`` group of its own.
    layout: str
    accept: Callable[[str], bool] = any_value
    #: Strings one of which a text must hold (lower case: ignoring case).
    hints: tuple[str, ...] = ()
    kind: str = "password"
    flags: int = re.IGNORECASE

    def rule(self) -> PatternRule:
        source = self.layout.format(
            name=CREDENTIAL_NAME, short=SHORT_NAME, header=HEADER_NAME, param=PARAM_NAME, value=VALUE
        )
        pattern = compile_later(source, self.flags)
        if "(?P<dq>" in source:
            replace = keyed(self.kind, self.accept)
        else:
            accept, kind = self.accept, self.kind

            def replace(match: re.Match[str]) -> str | None:
                name = "value" if match["value"] is not None else "mac"
                return group(kind, name, accept)(match)

        return PatternRule(self.kind, pattern, replace, self.hints)


_SEP = r"""["']?[ \t]*(?:=|:(?!//))[ \t]*"""

FORMATS: tuple[Format, ...] = (
    # .netrc: ``machine h login u password p``, on one line or several
    Format("netrc", r"\blogin\s+\S+\s+(?:password|passwd)\s+{value}", hints=("login",)),
    # .pgpass: ``host:port:database:user:password``, one entry a line
    Format(
        "pgpass",
        r"(?m)^[ \t]*[A-Za-z0-9_.\-*\[\]]+:(?:\d{{2,5}}|\*):[^:\s]+:[^:\s]+:(?P<value>[^\s:]\S*)[ \t]*$",
        lambda v: not re.fullmatch(r"[0-9a-fA-F]{1,4}", v),
        hints=(":",),
    ),
    # Oracle ``user/password@tns`` after a client or CONNECT, and in a thin JDBC URL
    Format(
        "oracle",
        r"(?:\b(?:sqlplus|rman|expdp|impdp|sqlldr|dgmgrl|exp|imp|conn(?:ect)?)(?:[ \t]+-\w+)*[ \t]+"
        r"|\bjdbc:oracle:\w+:)[\"']?[A-Za-z0-9_$#.]+/(?P<value>[^\s@/\"']+)@",
        hints=("@",),
    ),
    # SQL: ``CREATE USER … PASSWORD '…'``, ``ALTER ROLE … WITH PASSWORD '…'``, ``IDENTIFIED BY '…'``
    Format(
        "sql",
        r"\b(?:(?:WITH|LOGIN|ENCRYPTED|USER|ROLE)\b[^;\n]*?[ \t]PASSWORD|IDENTIFIED[ \t]+BY)"
        r"[ \t]+'(?P<value>[^'\n]+)'",
        hints=("password", "identified"),
    ),
    # env pairs on two lines (Kubernetes, ECS, compose): ``name: DB_PASSWORD`` / ``value: x``
    Format(
        "env_pair",
        r"""\bname["']?[ \t]*[:=][ \t]*["']?[A-Za-z0-9_.\-]*(?:{name})[A-Za-z0-9_]*["']?"""
        r"""[ \t]*,?[ \t]*\r?\n?[ \t]*(?:-[ \t]+)?["']?value["']?[ \t]*[:=][ \t]*{value}""",
        hints=("value",),
    ),
    # a short key: ``pass: x9!Lm``, ``pw=…`` (a password's shape, not "pass: true")
    Format(
        "short_key",
        r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_.\-])?(?:{short})" + _SEP + "{value}",
        password_shaped,
        hints=("pass", "pw"),
    ),
    # a key that names a credential in any key/value syntax: YAML, INI, env, TOML, JSON,
    # connection strings (``Password=…;``), front matter
    Format(
        "key_value",
        r"(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_.\-])*(?:password|passwd|passphrase|passcode|pwd)"
        + _SEP
        + "{value}",
        hints=("pass", "pwd"),
    ),
    # docker ``auths``: ``"auth": "<base64 of user:password>"``
    Format(
        "docker_auth",
        r"""["']?(?:auth|identitytoken|registrytoken)["']?[ \t]*:[ \t]*"""
        r"""["'](?P<value>[A-Za-z0-9+/=]{{8,}})["']""",
        basic_credentials,
        hints=("auth", "token"),
    ),
    # HTTP headers with any scheme: ``Authorization: Token …``, ``Splunk …``, ``X-Api-Key: …``
    Format(
        "http_header",
        r"(?<![A-Za-z0-9\-])(?:{header})[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?:(?!Digest\b|AWS4-)[A-Za-z][\w.\-]*[ \t]+)?(?P<value>[A-Za-z0-9\-._~+/:%]{{8,}}=*)",
        token_shaped,
        hints=("authorization", "token", "key", "x-", "auth"),
        kind="http_credential",
    ),
    # URL userinfo written with JSON-escaped slashes (``https:\/\/user:pass@``)
    Format(
        "url_escaped",
        r"\b[a-z][a-z0-9+.\-]*:\\/\\/[^\s:/@\\\"']*:(?P<value>[^\s@/\\\"']+)@",
        hints=(":\\/\\/",),
        kind="url_password",
    ),
    # URL userinfo percent-encoded (``https%3A%2F%2Fuser%3Apass%40host``)
    Format(
        "url_percent",
        r"%3A%2F%2F[^\s%/@:&]*%3A(?P<value>[^\s/@&%]+(?:%(?!40)[0-9A-F]{{2}}[^\s/@&%]*)*)%40",
        hints=("%3a%2f%2f",),
        kind="url_password",
    ),
    # URL and DSN query parameters that carry a credential (``?password=…``, ``&sig=…``)
    Format(
        "query_param",
        r"[?&;](?:password|passwd|pwd|pass|secret|client_secret)=(?P<value>[^&\s#\"'<>;]+)",
        hints=("pass", "pwd", "secret"),
        kind="url_credential",
    ),
    Format(
        "query_param",
        r"[?&;](?:{param})=(?P<value>[^&\s#\"'<>;]+)",
        lambda v: token_shaped(unquote(v)),
        hints=("=",),
        kind="url_credential",
    ),
    # PuTTY ``.ppk``: the private lines and their MAC
    Format(
        "ppk",
        r"Private-Lines:[ \t]*\d+[ \t]*\r?\n(?P<value>(?:[A-Za-z0-9+/=]{{4,}}[ \t]*(?:\r?\n|$))+)"
        r"|Private-MAC:[ \t]*(?P<mac>[0-9a-fA-F]{{20,}})",
        hints=("private-lines", "private-mac"),
        kind="private_key",
    ),
    # ``aws configure set aws_secret_access_key VALUE``, ``vault login TOKEN``
    Format(
        "positional",
        r"\b(?:configure[ \t]+set|config[ \t]+set)[ \t]+(?:[\w.\-]*\.)?[\w\-]*(?:{name})[\w\-]*[ \t]+{value}",
        hints=("set",),
    ),
    Format("positional", r"\bvault[ \t]+login[ \t]+(?!-){value}", token_shaped, hints=("vault",)),
    # ``echo X | docker login --password-stdin``
    Format(
        "stdin",
        r"\b(?:echo|printf)[ \t]+(?:-[neE]+[ \t]+)?{value}[ \t]*\|[^\n|]*--password-stdin",
        hints=("--password-stdin",),
    ),
)


# -- command-line flags -------------------------------------------------------------------

#: (commands, flag): the flag that takes the secret, for each client that has its own.
CLI_FLAGS: tuple[tuple[str, str], ...] = (
    (r"sqlcmd|bcp|osql|isql", r"-P[ \t]*"),
    (r"ldapsearch|ldapmodify|ldapadd|ldapdelete|ldapwhoami|ldappasswd|ldapcompare|ldapmodrdn|ldapexop",
     r"-w[ \t]*"),
    (r"mysql|mysqldump|mysqladmin|mysqlimport|mysqlsh|mariadb|mariadb-dump", r"-p(?=[^\s-])"),
    (r"sshpass", r"-p[ \t]*"),
    (r"redis-cli|valkey-cli|keydb-cli", r"(?:-a|--pass)[ \t]+"),
    (r"mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport", r"-p[ \t]+"),
    (r"login", r"-p[ \t]+"),
    (r"smbclient|rpcclient", r"-U[ \t]*[^\s%]+%"),
    (r"keytool|jarsigner", r"-(?:storepass|keypass)[ \t]+"),
    (r"plink|pscp|psftp", r"-pw[ \t]+"),
    (r"hdbsql|cqlsh", r"-p[ \t]+"),
    (r"influx", r"-password[ \t]+"),
)  # fmt: skip
#: Long flags that take a secret in any command.
LONG_FLAG = (
    r"--(?:password|passwd|passphrase|pass|secret|client-secret|api-key|apikey|token|auth-token"
    r"|access-token|secret-key|secret-access-key|private-key-passphrase|keystore-password|storepass)"
)
_SAME_COMMAND = r"[^\n|;&]*?[ \t]"


def _long_flag_value(value: str) -> bool:
    # ``docker build --secret id=npm,src=…`` names a file, not a value
    return not value.startswith("-") and not re.match(r"(?:id|src|type|env|source)=", value)


def _flag_rules() -> list[PatternRule]:
    rules = [
        PatternRule(
            "password",
            compile_later(rf"\b(?:{commands})\b{_SAME_COMMAND}(?:{flag}){VALUE}"),
            keyed("password", lambda v: not v.startswith("-")),
            tuple(commands.split("|")),
        )
        for commands, flag in CLI_FLAGS
    ]
    rules.append(
        PatternRule(
            "password",
            compile_later(rf"(?<![\w\-])(?P<key>{LONG_FLAG})(?:=|[ \t]+){VALUE}", re.IGNORECASE),
            # ``docker build --secret id=npm,src=…`` names a file, not a value
            keyed("password", _long_flag_value),
            ("--",),
        )
    )
    return rules


# -- blocks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockRule:
    """A rule over whole lines (a table, a YAML block, a command and its output)."""

    kind: str
    hints: tuple[str, ...]
    find: Callable[[str], list[tuple[int, int]]]

    def apply(self, text: str, findings: Counter[str]) -> str:
        spans = sorted(set(self.find(text)))
        for start, end in reversed(spans):
            text = text[:start] + redacted(self.kind) + text[end:]
        if spans:
            findings[self.kind] += len(spans)
        return text


def _lines(text: str) -> list[tuple[int, str]]:
    out, offset = [], 0
    for line in text.splitlines(keepends=True):
        out.append((offset, line.rstrip("\r\n")))
        offset += len(line)
    return out


_CELL_NAME = compile_later(rf"(?<![a-z])(?:{CREDENTIAL_NAME}|{SHORT_NAME})s?(?![a-z])", re.IGNORECASE)
#: Header words that describe a credential rather than hold one ("password policy").
_CELL_ABOUT = compile_later(
    r"\b(?:name|names|id|ids|policy|rotation|rotated|expiry|expires|length|type|location|path|file|where|owner"
    r"|status|manager|store|vault|source|ref|reference|hint|reset|required|description|notes?)\b",
    re.IGNORECASE,
)
_TABLE_RULE = compile_later(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_TABLE_ANYWHERE = compile_later(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*\|", re.MULTILINE)


def _cells(line: str) -> list[tuple[int, int]]:
    """Each cell's span (stripped) in a Markdown table row."""
    spans, start = [], 0
    stripped = line.strip()
    lead = line.index(stripped[0]) if stripped else 0
    body_start = lead + (1 if stripped.startswith("|") else 0)
    body_end = lead + len(stripped) - (1 if stripped.endswith("|") and len(stripped) > 1 else 0)
    start = body_start
    for match in re.finditer(r"(?<!\\)\|", line[body_start:body_end]):
        spans.append((start, body_start + match.start()))
        start = body_start + match.end()
    spans.append((start, body_end))
    trimmed = []
    for s, e in spans:
        cell = line[s:e]
        left = len(cell) - len(cell.lstrip())
        right = len(cell.rstrip())
        trimmed.append((s + left, s + max(left, right)))
    return trimmed


def _cell_value(line: str, start: int, end: int) -> tuple[int, int] | None:
    cell = line[start:end]
    if cell.startswith("`") and cell.endswith("`") and len(cell) > 2:
        start, end, cell = start + 1, end - 1, cell[1:-1]
    if not re.fullmatch(_TOKEN, cell) or is_placeholder(cell) or not password_shaped(cell):
        return None
    return start, end


def _names_credential(cell: str) -> bool:
    return bool(_CELL_NAME.search(cell)) and not _CELL_ABOUT.search(cell)


def _table_cells(text: str) -> list[tuple[int, int]]:
    """The value beside a first cell that names a credential (``| DB_PASSWORD | x9!… |``):
    a row keyed in its first column. A cell under a header that names one is read by the
    canonical view instead, which pairs each cell with its column's header
    (``password: …``) for the key/value row (``SecretRedactor``'s view pass)."""
    spans: list[tuple[int, int]] = []
    if not _TABLE_ANYWHERE.search(text):  # no header rule, no table (a shell pipe is not one)
        return spans
    lines = _lines(text)
    for i, (offset, line) in enumerate(lines):
        if "|" not in line:
            continue
        if _TABLE_RULE.match(line):
            continue
        cells = _cells(line)
        following = lines[i + 1][1] if i + 1 < len(lines) else ""
        if _TABLE_RULE.match(following):  # a header row
            continue
        for n, (s, e) in enumerate(cells):
            if n == 1 and _names_credential(line[cells[0][0] : cells[0][1]]):
                value = _cell_value(line, s, e)
                if value is not None:
                    spans.append((offset + value[0], offset + value[1]))
    return spans


_STRING_DATA = compile_later(r"^(?P<indent>[ \t]*)stringData:[ \t]*$")
_YAML_PAIR = compile_later(
    r"^(?P<indent>[ \t]+)[\"']?[\w.\-]+[\"']?:[ \t]+(?P<value>[^\s#|>][^#\n]*?)[ \t]*$"
)


def _string_data(text: str) -> list[tuple[int, int]]:
    """Every value under a Kubernetes Secret's ``stringData`` (a Secret's whole content,
    random-looking or not)."""
    spans: list[tuple[int, int]] = []
    lines = _lines(text)
    i = 0
    while i < len(lines):
        header = _STRING_DATA.match(lines[i][1])
        i += 1
        if not header:
            continue
        base = len(header["indent"])
        while i < len(lines):
            offset, line = lines[i]
            pair = _YAML_PAIR.match(line)
            if not line.strip():
                i += 1
                continue
            if len(line) - len(line.lstrip()) <= base:
                break
            if pair:
                value = pair["value"].strip("\"'")
                if not is_placeholder(value):
                    start = pair.start("value") + (1 if pair["value"][0] in "\"'" else 0)
                    spans.append((offset + start, offset + start + len(value)))
            i += 1
    return spans


#: A command whose output is a credential: ``vault token create -field=token``,
#: ``aws ecr get-login-password``, ``kubectl get secret … | base64 -d``.
_PRINTS_CREDENTIAL = compile_later(
    rf"^\s*(?:[$%]|PS[^>\n]*>|[\w.\-]+@[\w.\-]+[^$#\n]*[$#])\s+\S.*(?:{CREDENTIAL_NAME}|get-login-password|print-access-token"
    r"|create-token|base64[ \t]+(?:-d|--decode))",
    re.IGNORECASE,
)


_PRINTS_CREDENTIAL_ANYWHERE = compile_later(_PRINTS_CREDENTIAL.pattern, re.IGNORECASE | re.MULTILINE)


def _output_lines(text: str) -> list[tuple[int, int]]:
    """A bare token alone on the output line(s) of a command that prints a credential."""
    spans: list[tuple[int, int]] = []
    if not _PRINTS_CREDENTIAL_ANYWHERE.search(text):  # one scan, not one per line
        return spans
    lines = _lines(text)
    for i, (_offset, line) in enumerate(lines):
        # a command continued with ``\`` goes on with its own flags, not its output
        if line.rstrip().endswith("\\") or not _PRINTS_CREDENTIAL.match(line):
            continue
        for offset, output in lines[i + 1 : i + 3]:
            token = output.strip()
            if not token or token.startswith(("$", "#", "```", ">", "-")):
                break
            if re.fullmatch(_TOKEN, token) and not is_placeholder(token) and token_shaped(token):
                start = offset + output.index(token)
                spans.append((start, start + len(token)))
    return spans


_CONTINUED = compile_later(r"\[REDACTED:(?P<kind>[a-z0-9_]+)\]\\\r?\n[ \t]*(?P<value>[^\s\\]+)(?P<more>\\?)")


def _continued(match: re.Match[str]) -> str:
    if is_placeholder(match["value"]):
        return match[0]
    start, end = match.span("value")
    return match[0][: start - match.start()] + redacted(match["kind"]) + match[0][end - match.start() :]


def continuation(text: str, findings: Counter[str]) -> str:
    """A redacted value continued onto the next line with ``\\``: its rest goes too."""
    while True:
        replaced = _CONTINUED.sub(_continued, text)
        if replaced == text:
            return text
        text = replaced


def block_rules() -> list[BlockRule]:
    return [
        BlockRule("password", ("|",), _table_cells),
        BlockRule("password", ("stringdata",), _string_data),
        BlockRule("password", ("$", "%", "PS"), _output_lines),
    ]


def context_rules() -> list[PatternRule]:
    """The format table and the flags, in order."""
    return [*(fmt.rule() for fmt in FORMATS), *_flag_rules()]
