"""Secret/PII redaction: every pattern fires on its secret and not on look-alikes.

Fake secrets are built at run time from obviously fake parts; no real-looking token is
stored in this file.
"""

from __future__ import annotations

import base64

import pytest

from lore.safety.secrets import SecretRedactor, is_placeholder, looks_random, redact_secrets
from lore.testing.attacks import PlantedCase, secret_cases, unsafe_payloads

REDACTOR = SecretRedactor()
PII = SecretRedactor(emails=True, phone_numbers=True)

FAKE_KEY_ID = "AKIA" + "EXAMPLE" + "FAKEKEY99"
FAKE_GHP = "ghp_" + "x" * 36
FAKE_GHO = "gho_" + "Ab1" * 12
FAKE_SLACK_USER = "xoxp-" + "1" * 10 + "-" + "f" * 12
FAKE_GLDT = "gldt-" + "x" * 20


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# (kind, text containing a secret, the secret itself)
FIRES: list[tuple[str, str, str]] = [(case.kind, case.text, case.payloads[0]) for case in secret_cases()] + [
    ("aws_access_key_id", f"key id {'ASIA' + 'EXAMPLE' + 'TEMPKEY99'} for the session", "EXAMPLETEMPKEY99"),
    ("github_token", f"token {FAKE_GHO}", FAKE_GHO),
    ("gitlab_token", f"deploy token {FAKE_GLDT}", FAKE_GLDT),
    ("slack_token", f"user token {FAKE_SLACK_USER}", FAKE_SLACK_USER),
    ("private_key", "-----BEGIN OPENSSH " + "PRIVATE KEY-----\n" + "FAKEOPENSSH" * 6, "FAKEOPENSSH"),
    ("bearer_token", "authorization: bearer " + "fake.jwtish." + "0" * 20, "fake.jwtish"),
    ("basic_auth", f"Authorization: Basic {_b64('ops:fakepw1')}", _b64("ops:fakepw1")),
    ("db_connection_string", "mongodb+srv://svc:" + "fakeMongo1" + "@cluster0.internal/db", "fakeMongo1"),
    ("db_connection_string", "redis://:" + "fakeRedis2" + "@cache.internal:6379/0", "fakeRedis2"),
    ("url_password", "amqp-admin at ftp://ops:" + "fakeFtp3" + "@files.internal/", "fakeFtp3"),
    ("password", 'MYSQL_ROOT_PASSWORD: "' + "fake pass phrase" + '"', "fake pass phrase"),
    ("password", "Server=db;User Id=sa;Password=" + "fakeSql4" + ";", "fakeSql4"),
    ("password", '{"api_key": "' + "fake-api-key-5" + '"}', "fake-api-key-5"),
    ("password", "mysql -u root --password " + "fakeCli6", "fakeCli6"),
    ("password", "client_secret=" + "fakeClient7", "fakeClient7"),
    ("password", "postgresql://app@db/x?sslmode=require&password=" + "fakeQuery8", "fakeQuery8"),
    ("secret", "GITHUB_TOKEN=" + "0123456789abcdef" * 2 + "fade", "0123456789abcdef"),
    ("secret", "webhook_secret: " + "Fk" + "9" * 14 + "xyz", "Fk99999999999999"),
    ("high_entropy", "X-Signature: " + "Zq8" + "r2LmX9vB4nT7kP1sW6y", "Zq8r2LmX9vB4nT7kP1sW6y"),
    (
        "high_entropy",
        "'session_cookie': '" + "7Hq" + "Lw2Zp9Xv4Bn8Mk1Rt6Ys3" + "'",
        "7HqLw2Zp9Xv4Bn8Mk1Rt6Ys3",
    ),
]


@pytest.mark.parametrize(
    ("kind", "text", "secret"), FIRES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(FIRES)]
)
def test_pattern_fires(kind: str, text: str, secret: str) -> None:
    redacted, findings = REDACTOR.redact(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted
    assert findings[kind] >= 1, findings


def test_every_kind_has_a_firing_case() -> None:
    kinds = {kind for kind, _, _ in FIRES}
    assert kinds >= {
        "aws_access_key_id", "aws_secret_access_key", "github_token", "gitlab_token", "slack_token",
        "slack_webhook", "jwt", "private_key", "bearer_token", "basic_auth", "url_password",
        "db_connection_string", "password", "secret", "high_entropy",
    }  # fmt: skip


# (kind the look-alike resembles, text that must come out unchanged)
LOOK_ALIKES: list[tuple[str, str]] = [
    (
        "aws_access_key_id",
        "AKIA is the prefix of an access key id; akia" + "example" + "fakekey99 is lowercase.",
    ),
    ("aws_access_key_id", "AKIA" + "SHORT1"),
    ("aws_secret_access_key", "aws_secret_access_key = <from-vault>"),
    ("aws_secret_access_key", "commit 3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3 rotated the key"),
    ("github_token", "ghp_ tokens are 40 characters; ghp_short is not one."),
    ("github_token", "github_pat_ is the fine-grained prefix"),
    ("gitlab_token", "glpat-short and the glpat- prefix"),
    ("slack_token", "xoxb- tokens belong to bots"),
    ("slack_webhook", "Post to https://hooks.slack.com/services/<team>/<channel>/<token>"),
    ("jwt", "eyJ is base64 for '{\"'; eyJhbGciOiJIUzI1NiJ9 alone is just a header"),
    (
        "private_key",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfake\n-----END PUBLIC KEY-----",
    ),
    ("private_key", "Paste the -----BEGIN PRIVATE KEY----- header into the form."),
    ("bearer_token", "Send `Authorization: Bearer <token>` or Bearer $TOKEN."),
    ("bearer_token", "The bearer authentication scheme is described in RFC 6750."),
    ("basic_auth", "Basic authentication is disabled; the basic tier is cheaper."),
    ("url_password", "Connect with postgresql://app:<password>@db.internal:5432/orders"),
    ("url_password", "https://user:${PASSWORD}@git.internal/repo and https://grafana.internal/d/abc:1"),
    ("db_connection_string", "mysql://root@localhost/app has no password"),
    ("password", "Set password=<your-password> in ~/.pgpass."),
    ("password", "password: ${DB_PASSWORD}"),
    ("password", 'password: "{{ .Values.db.password }}"'),
    ("password", "password=******** and passwd=xxxxxxxx"),
    ("password", "PGPASSWORD=$DB_PASS psql"),
    ("password", "password_min_length: 12 and password_policy: strict"),
    ("password", "Run `pwd` to see the directory."),
    ("secret", "secret: db-credentials"),
    ("secret", "secretName: payments-api-7d9f8b6c4"),
    ("secret", "token: short1"),
    ("secret", "tokenizer: wordpiece"),
    ("secret", "secret: payments-api-db-credentials-v2"),
    ("high_entropy", "commit: 3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3"),
    ("high_entropy", "revision=3F2A9C1B4D5E6F708192A3B4C5D6E7F809A1B2C3"),
    ("high_entropy", "request_id=550e8400-e29b-41d4-a716-446655440000"),
    ("high_entropy", "digest: sha256:" + "ab12" * 16),
    ("high_entropy", "data: " + _b64("hello world this is an ordinary sentence")),
    ("high_entropy", "pod: payments-api-7d9f8b6c4-x2k9p"),
    ("high_entropy", "path: /usr/lib/x86_64-linux-gnu/libssl3"),
    ("high_entropy", "class=PaymentServiceRetryPolicyV2Impl"),
    ("high_entropy", "url: https://grafana.internal/d/Xk29aLm4z/payments-overview"),
    ("email", "mail alice@example.com"),  # e-mail redaction is off by default
    ("phone_number", "call +1 415 555 0100"),  # so is phone-number redaction
]


@pytest.mark.parametrize(
    ("kind", "text"), LOOK_ALIKES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(LOOK_ALIKES)]
)
def test_look_alike_is_left_alone(kind: str, text: str) -> None:
    assert REDACTOR.redact(text) == (text, {})


def test_emails_and_phone_numbers_only_when_enabled() -> None:
    text = "Page alice.ops+oncall@example.com, or call +1 415 555 0100 / (415) 555-0100 / 415-555-0100."
    redacted, findings = PII.redact(text)
    assert "alice.ops" not in redacted
    assert "555" not in redacted
    assert findings == {"email": 1, "phone_number": 3}
    assert SecretRedactor(emails=True).redact(text)[1] == {"email": 1}
    assert SecretRedactor(phone_numbers=True).redact(text)[1] == {"phone_number": 3}


@pytest.mark.parametrize(
    "text",
    [
        "git@github.com:org/repo.git",
        "released 2024-01-15, see 10.0.0.1:8080, version 1.2.3, port 5432",
        "between 12:00 and 13:30 UTC, 2024/01/15",
        "ticket OPS-1234-5678",
        "latency 1200 ms at 99.9%",
    ],
)
def test_pii_look_alikes(text: str) -> None:
    assert PII.redact(text) == (text, {})


def test_secret_cases_from_the_shared_fixture_are_all_caught() -> None:
    for case in secret_cases():
        redacted, findings = REDACTOR.redact(case.text)
        assert unsafe_payloads(redacted, [case]) == [], case.name
        assert findings[case.kind] >= 1, (case.name, findings)


def test_redaction_is_idempotent() -> None:
    text = "\n".join(case.text for case in secret_cases())
    once, _ = REDACTOR.redact(text)
    assert REDACTOR.redact(once) == (once, {})


def test_redact_secrets_helper() -> None:
    assert redact_secrets(f"token {FAKE_GHP}") == "token [REDACTED:github_token]"


@pytest.mark.parametrize(
    "value", ["<your-password>", "${DB_PASSWORD}", "$PGPASS", "{{ secret }}", "****", "xxxxxxxx", "changeme",
              "your_token_here", "[REDACTED:password]", "%(password)s", "..."],
)  # fmt: skip
def test_placeholders(value: str) -> None:
    assert is_placeholder(value)


@pytest.mark.parametrize("value", ["hunter2", "fake-pass-789", "correct horse battery staple"])
def test_real_looking_values_are_not_placeholders(value: str) -> None:
    assert not is_placeholder(value)


def test_looks_random() -> None:
    assert looks_random("Zq8r2LmX9vB4nT7kP1sW6y")
    assert not looks_random("3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3")  # a commit SHA
    assert not looks_random("550e8400-e29b-41d4-a716-446655440000")  # a UUID
    assert not looks_random("payments-api-7d9f8b6c4-x2k9p")  # a pod name
    assert not looks_random(_b64("an ordinary sentence, base64 encoded"))


def test_secret_case_table_is_built_at_runtime() -> None:
    # The fixture module must not hold literal tokens: every case is assembled in code.
    assert all(isinstance(case, PlantedCase) for case in secret_cases())
