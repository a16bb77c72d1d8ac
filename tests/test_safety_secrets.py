"""Secret/PII redaction: every pattern fires on its secret and not on look-alikes.

Fake secrets are built at run time from obviously fake parts; no real-looking token is
stored in this file.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lore.safety import secret_vendors
from lore.safety.secret_rules import PatternRule, Rule
from lore.safety.secrets import (
    SecretRedactor,
    _HintedRules,
    is_placeholder,
    looks_random,
    redact_secrets,
)
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


# -- vendor formats, command lines, prose, key material (issue 10) ------------------------


def _hex(n: int) -> str:
    return ("deadbeef" * (n // 8 + 1))[:n]


def _fake(n: int) -> str:
    return ("FakeToken0123456789" * (n // 19 + 1))[:n]


def _random_b64(n: int) -> str:
    return base64.b64encode(bytes((i * 37 + 11) % 256 for i in range(n))).decode()


# (kind, text, secret): each rule on the vendor's documented shape, in a sentence
VENDOR_FIRES: list[tuple[str, str, str]] = [
    # lore's own table (formats detect-secrets 1.5 lacks)
    ("anthropic_api_key", "key " + "sk-ant-" + "api03-" + "x" * 93 + "AA" + " for the bot", "x" * 93),
    ("openai_api_key", "use " + "sk-" + "proj-" + "x" * 50 + " today", "x" * 50),
    ("openai_api_key", "use " + "sk-" + "svcacct-" + "y" * 40 + ".", "y" * 40),
    ("openai_api_key", "legacy " + "sk-" + "A1" * 24, "A1" * 24),
    ("stripe_key", "test mode " + "sk_" + "test_" + "x" * 24, "x" * 24),
    ("stripe_key", "webhook " + "whsec_" + "x" * 32, "x" * 32),
    ("npm_token", "the npm token " + "npm_" + "x" * 36 + " publishes", "x" * 36),
    ("google_api_key", "Maps key " + "AI" + "za" + "x" * 35, "x" * 35),
    ("google_oauth_secret", "client secret " + "GOCSPX-" + "x" * 28, "x" * 28),
    ("huggingface_token", "pull with " + "hf_" + "x" * 34, "x" * 34),
    ("vault_token", "VAULT token " + "hvs." + "x" * 24, "x" * 24),
    ("digitalocean_token", "doctl uses " + "dop_" + "v1_" + _hex(64), _hex(64)),
    ("shopify_token", "shop " + "shpat_" + _hex(32), _hex(32)),
    ("grafana_token", "grafana " + "glsa_" + "x" * 32 + "_" + _hex(8), "x" * 32),
    ("databricks_token", "workspace " + "dapi" + _hex(32), _hex(32)),
    ("postman_api_key", "postman " + "PMAK-" + _hex(24) + "-" + _hex(34), _hex(34)),
    ("atlassian_api_token", "jira " + "ATATT3" + "x" * 180, "x" * 180),
    ("linear_api_key", "linear " + "lin_api_" + "x" * 40, "x" * 40),
    ("doppler_token", "doppler " + "dp.pt." + "x" * 43, "x" * 43),
    ("pulumi_token", "pulumi " + "pul-" + _hex(40), _hex(40)),
    ("sentry_token", "sentry " + "sntrys_" + "x" * 60, "x" * 60),
    ("newrelic_key", "new relic " + "NRAK-" + "X" * 27, "X" * 27),
    ("mailgun_key", "mailgun " + "key-" + _hex(32), _hex(32)),
    ("age_secret_key", "age " + "AGE-SECRET-KEY-1" + "Q" * 58, "Q" * 58),
    ("azure_client_secret", "app secret " + "abc" + "8Q~" + "x" * 34, "x" * 34),
    ("lore_api_token", "my token " + "lore_" + "Ab3-_" * 8 + "xyz", "Ab3-_" * 8 + "xyz"),
    # detect-secrets' plugins
    ("stripe_key", "prod " + "sk_" + "live_" + "0" * 95, "0" * 95),  # widened past its 24 characters
    ("stripe_key", "restricted " + "rk_" + "live_" + "0" * 24, "0" * 24),
    ("twilio_key", "account " + "AC" + "a" * 32, "a" * 32),
    ("twilio_key", "api key " + "SK" + "0" * 32, "0" * 32),
    ("sendgrid_api_key", "mail " + "SG." + "x" * 22 + "." + "y" * 43, "y" * 43),
    ("mailchimp_api_key", "list " + "a" * 32 + "-us12", "a" * 32),
    ("discord_bot_token", "bot " + "M" + "x" * 23 + "." + "y" * 6 + "." + "z" * 27, "z" * 27),
    ("telegram_bot_token", "bot " + "123456789:" + "A" * 35, "A" * 35),
    ("square_oauth_secret", "square " + "sq0csp-" + "x" * 43, "x" * 43),
    ("pypi_token", "upload " + "pypi-" + "AgEIcHlwaS5vcmc" + "x" * 70, "x" * 70),
    ("artifactory_token", "artifactory " + "AKC" + "x" * 12 + " here", "x" * 12),
    ("azure_storage_key", "conn AccountKey=" + "a" * 86 + "==", "a" * 86),
    ("npm_token", "//registry.npmjs.org/:_authToken=" + "npm_" + "Fake" + "x" * 10, "xxxxxxxxxx"),
    ("gitlab_token", "feed token " + "glft-" + "x" * 20, "x" * 20),
    ("gitlab_token", "runner " + "GR1348941" + "x" * 20, "x" * 20),
    ("openai_api_key", "legacy " + "sk-" + "x" * 20 + "T3Blbk" + "FJ" + "y" * 20, "y" * 20),
    ("aws_secret_access_key", "aws_token: '" + _fake(40) + "'", _fake(40)),
    ("ibm_cloud_iam_key", "ibm_cloud_iam_key = " + _fake(44), _fake(44)),
]

STRUCTURE_FIRES: list[tuple[str, str, str]] = [
    ("password", "mysqldump -u root -p'" + "fakeDump1" + "' orders", "fakeDump1"),
    ("password", "mysql -uroot -p" + "fakeMy2" + " -e 'select 1'", "fakeMy2"),
    ("password", "redis-cli -h cache.internal -a " + "fakeRedis9" + " ping", "fakeRedis9"),
    ("password", "mongosh -u admin -p " + "fakeMongo8" + " --authenticationDatabase admin", "fakeMongo8"),
    ("password", "docker login -u ci -p " + "fakeDocker7" + " registry.internal", "fakeDocker7"),
    ("password", "openssl pkcs12 -in a.p12 -passin pass:" + "fakeP12pw6", "fakeP12pw6"),
    ("password", "htpasswd -bc /etc/nginx/.htpasswd admin " + "fakeHt5pw", "fakeHt5pw"),
    ("password", "curl --user ops:" + "fakeCurl4" + " https://ci.internal/", "fakeCurl4"),
    ("password", "curl -s -X POST -u 'ops:" + "fakeCurl5" + "' https://ci.internal/", "fakeCurl5"),
    ("password", "wget --password=" + "fakeWget3" + " https://files.internal/x", "fakeWget3"),
    ("password", "sshpass -p'" + "fakeSsh2" + "' ssh ops@bastion", "fakeSsh2"),
    ("password", "export PGPASSWORD='" + "fakePg1" + "'; psql -h db", "fakePg1"),
    ("password", "The admin password was reset to " + "Hunter22x" + ".", "Hunter22x"),
    ("password", "Password for the vault UI is `" + "correct horse battery" + "`.", "correct horse battery"),
    ("password", "The passphrase is " + "fake" + "Phrase99" + ", do not share it.", "fakePhrase99"),
    ("password", "password: `" + "fakeTick5" + "`", "fakeTick5"),
    ("key_material", "APP_KEY=base64:" + _random_b64(32), _random_b64(32)[:20]),
    ("key_material", "signingKey: " + _hex(64), _hex(64)),
    ("key_material", "ENCRYPTION_KEY='" + _hex(32) + "'", _hex(32)),
    ("key_material", "master_key = " + _hex(40), _hex(40)),  # a SHA-1's length, but under a key name
    # credentials in URL query parameters still go (Azure SAS ``sig``), ids do not (above)
    (
        "high_entropy",
        "https://acct.blob.internal/c?sv=2022-11-02&sig=" + "Zq8r2LmX9vB4nT7kP1sW6y",
        "Zq8r2LmX9",
    ),
    (
        "high_entropy",
        "vault write auth/approle/login role_id=payments secret_id=" + "Zq8r2LmX9vB4nT7kP1sW6y",
        "Zq8r2LmX9",
    ),
]

NEW_LOOK_ALIKES: list[str] = [
    # vendor prefixes alone, placeholders, words that share a prefix
    "Use the sk- prefix; sk-proj-<your-key> goes in the vault, sk-ant-... likewise.",
    "AIza keys are restricted by HTTP referrer; npm_config_cache=/tmp/npm is a setting.",
    "hf_hub_download fetches a file; the key-value store and key-rotation-policy docs.",
    "lore_serve, lore_token_create_with_a_name_that_is_long_enough and lore_" + "x" * 44 + " are not tokens.",
    "The ACCOUNT_SID starts with AC; SKU numbers and SG.1 are not keys.",
    "between 12:30:00 and 13:00:00; job 123456789:done",
    # command lines without a password on them
    "mysql -u root -p orders   # prompts for the password",
    "Run mysql -p and type it; or mysql -p$MYSQL_PWD from the environment.",
    'curl -u "$USER:$TOKEN" https://ci.internal/ and curl -u admin https://ci.internal/',
    "sshpass -f ~/.pw ssh host; sshpass -e ssh host; ssh -p 2222 bastion",
    "docker login -u ci --password-stdin registry.internal",
    'redis-cli -a "$REDIS_PASSWORD" ping',
    "openssl pkcs12 -in a.p12 -passin env:P12_PASS -passout file:out.txt",
    "PGPASSWORD=$DB_PASS psql -h db",
    # prose about passwords that holds none
    "The password is stored in Vault under secret/db.",
    "The password is rotated every 90 days and the passphrase is never written down.",
    "The password was reset to the default by the operator.",
    "The password is at least 12 characters long.",
    "Your password will be emailed to you; the password is in 1Password.",
    "If the password is wrong, the login page says so.",
    # identifiers under key names
    "partition_key: 3f2a9c1b4d5e6f708192a3b4c5d6e7f8",
    "ssh_public_key: AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFake",
    "cache_key=7f3a9c1b4d5e6f708192a3b4c5d6e7f8 idempotency_key: 550e8400-e29b-41d4-a716-446655440000",
    "signing_key: <from-vault> and APP_KEY=base64:${APP_KEY}",
    "routing_key: payments.orders.created, sort_key=created_at",
    "hotkey: ctrl-alt-delete, monkey=patch",
    # checksums, digests, commit ids, UUIDs, base64 of text
    "image: registry.internal/payments@sha256:" + "a1b2c3d4" * 8,
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  lore-1.2.tar.gz",
    "md5: d41d8cd98f00b204e9800998ecf8427e, checksum = " + "e3b0c442" * 8,
    'etag: "33a64df551425fcc55e4d42a148795d9f25f89d4"',
    "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
    "git revert 3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3 && git push",
    "gpg --recv-keys 0x3F2A9C1B4D5E6F708192A3B4C5D6E7F809A1B2C3",
    "request 550e8400-e29b-41d4-a716-446655440000 and node i-0a1b2c3d4e5f67890",
    "payload: " + _b64("the quick brown fox jumps over the lazy dog"),
    "uid: 1000, inode 1234567890123, build 20240115.3",
    # shapes that the shared corpora hold (bench/redaction_false_positives.py), none a secret
    "2048 SHA256:" + _random_b64(32)[:43] + " bastion.internal (RSA)",
    "auth_tag: " + _random_b64(16) + " iv: " + _random_b64(16),
    "irb> a.update(authentication_token: Devise.friendly_token.first(16))",
    "(user: elastic, password: it should have been added to the vault)",
    "curl -u 'xxx:yyy' https://es.internal:9243/_cat/shards",
    "error: refs/keep-around/3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3: invalid sha1 pointer",
    "--pid=container:k8s_sidekiq_payments-export-966444c8-sbpj5_default_148e5cfb-21a2-11ea-b2f5-4201ac100006_0",
    '"ulid": "01EKFRDZCR4HEZNWQG8Z2RZ22Y", correlation_id:01F7HWR7B46Q5S8QGP8MTZ7BG5',
    "https://video.example/watch?v=fDeeYqCnuoM&list=PL05JrBw4t0KoPzC03-4yXuJEWdUo7VZfX&index=13",
    "https://drive.example/open?id=0BzamLYNnSQa_cjN5NGtaRnpyRXc",
    "CF-RAY: 659b165e985bfdb1-PDX",
    '"Value": "' + _b64("patroni-11-db-main.c.payments-production.internal") + '"',
    '"token": "get_me_from_vault"',
    "privatekey: /etc/docker/registry/storage/0/private-key",
    '"client_secret": "client_secret_value", "cookie_secret": "cookie_secret_value"',
    '"name": "Section_B1ED9B265059440CBD99E88E6CBBB5F7", "n": "TOTP_91FEC9FFBDEE4A1BB75D05336278E3ED"',
    "password: wrong-password and api_key: super-secret-key",
    "ID: 1s0q9mp65e2f370q9s7ip75g6sj0sifg",
    "Go BuildID=mocZaRlBkbCciCWvbae0/jd2tWQJoTiGknHio9Lgw/8XHiDaWStpC9onSk_TwM/82Iaw_TMpLExCoau_B1N",
    "psql --password --port=5432 --host=localhost",
    "--certificate=user-content.example.net.crt --private-key=user-content.example.net.key",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
]


@pytest.mark.parametrize(
    ("kind", "text", "secret"),
    VENDOR_FIRES + STRUCTURE_FIRES,
    ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(VENDOR_FIRES + STRUCTURE_FIRES)],
)
def test_new_rule_fires(kind: str, text: str, secret: str) -> None:
    redacted, findings = REDACTOR.redact(text)
    assert secret not in redacted, redacted
    assert f"[REDACTED:{kind}]" in redacted, (redacted, findings)


LOOK_ALIKE_IDS = [f"look-alike-{i}" for i, _ in enumerate(NEW_LOOK_ALIKES)]


@pytest.mark.parametrize("text", NEW_LOOK_ALIKES, ids=LOOK_ALIKE_IDS)
def test_new_look_alike_is_left_alone(text: str) -> None:
    assert REDACTOR.redact(text) == (text, {})


def test_every_detect_secrets_plugin_and_extra_vendor_has_a_firing_case() -> None:
    from lore.safety.secret_vendors import _PLUGINS, EXTRA_VENDORS

    fired = {kind for kind, _, _ in VENDOR_FIRES + FIRES}
    plugin_kinds = {k for _, _, kinds, _ in _PLUGINS for k in ((kinds,) if isinstance(kinds, str) else kinds)}
    missing = (plugin_kinds | {rule.kind for rule in EXTRA_VENDORS}) - fired
    # Cloudant and SoftLayer need their own hostnames in the text; covered by detect-secrets.
    assert missing <= {"cloudant_credentials", "softlayer_credentials", "ibm_cos_hmac_secret"}, missing


def test_a_vendor_token_is_redacted_whole_not_only_the_part_its_regex_matched() -> None:
    key = "sk_" + "live_" + "FAKE" + "0" * 95
    redacted, _ = REDACTOR.redact(f"key={key}.")
    assert redacted == "key=[REDACTED:stripe_key]."


def test_new_cases_stay_redacted_once() -> None:
    text = "\n".join(t for _, t, _ in VENDOR_FIRES + STRUCTURE_FIRES)
    once, _ = REDACTOR.redact(text)
    assert REDACTOR.redact(once) == (once, {})


def _every_rule_over_the_whole_text(text: str) -> tuple[str, Counter[str]]:
    from lore.safety.secret_context import block_rules, context_rules, continuation
    from lore.safety.secret_rules import PRIVATE_KEY
    from lore.safety.secrets import _betterleaks

    findings: Counter[str] = Counter()
    text = PRIVATE_KEY.apply(text, findings)
    for rule in REDACTOR._line_rules:
        text = rule.apply(text, findings)
    for rule in [*context_rules(), *block_rules()]:
        text = rule.apply(text, findings)
    text = _betterleaks(continuation(text, findings), findings)
    return REDACTOR._redact_escaped_lines(text, findings), findings


def test_blocks_and_hints_only_skip_rules_that_could_not_match() -> None:
    cases = [text for _, text, _ in FIRES + VENDOR_FIRES + STRUCTURE_FIRES]
    cases += NEW_LOOK_ALIKES + [text for _, text in LOOK_ALIKES]
    for text in cases:
        assert REDACTOR.redact(text) == _every_rule_over_the_whole_text(text), text
    whole = "\n".join(cases * 3)
    assert REDACTOR.redact(whole) == _every_rule_over_the_whole_text(whole)


# -- detect-secrets' patterns, cached -------------------------------------------------------

_PROBE_SCRIPT = (
    "import sys\n"
    "from lore.safety.secrets import redact_secrets\n"
    "token = 'ghp_' + 'A1b2C3d4' * 5\n"
    "print(redact_secrets('the token is ' + token), 'detect_secrets' in sys.modules)\n"
)


def _probe_redaction(cache_dir: Path) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env["LORE_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = str(Path(secret_vendors.__file__).parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _PROBE_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_cached_patterns_are_detect_secrets_own() -> None:
    fresh = secret_vendors._rules_from_plugins()
    assert [
        (r.kind, r.pattern.pattern, r.pattern.flags, r.hints) for r in secret_vendors.library_rules()
    ] == [(r.kind, r.pattern.pattern, r.pattern.flags, r.hints) for r in fresh]
    assert len(fresh) > 20


def test_a_second_process_redacts_without_importing_detect_secrets(tmp_path: Path) -> None:
    assert _probe_redaction(tmp_path) == "the token is [REDACTED:github_token] True"
    assert len(list(tmp_path.glob("detect-secrets-patterns-*.json"))) == 1
    assert _probe_redaction(tmp_path) == "the token is [REDACTED:github_token] False"


def test_two_installs_keep_a_cache_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two environments (a pipx install, a project venv) must not overwrite each other's.
    monkeypatch.setenv("LORE_CACHE_DIR", str(tmp_path))
    rules = secret_vendors._rules_from_plugins()
    secret_vendors._write_cache("a" * 64, rules)
    secret_vendors._write_cache("b" * 64, rules[:1])
    assert secret_vendors._read_cache("a" * 64) is not None
    assert len(secret_vendors._read_cache("a" * 64) or []) == len(rules)
    assert len(secret_vendors._read_cache("b" * 64) or []) == 1


@pytest.mark.parametrize(
    "content",
    [
        "{torn",
        json.dumps({"key": "another detect-secrets", "rules": [["github_token", "never", 0, []]]}),
        json.dumps({"key": None, "rules": "not a list"}),
    ],
)
def test_a_torn_or_foreign_cache_is_rebuilt(tmp_path: Path, content: str) -> None:
    key = secret_vendors._installed_key() or ""
    (tmp_path / f"detect-secrets-patterns-{key[:16]}.json").write_text(content, encoding="utf-8")
    assert _probe_redaction(tmp_path) == "the token is [REDACTED:github_token] True"
    assert _probe_redaction(tmp_path) == "the token is [REDACTED:github_token] False"


def test_a_remembered_redaction_answers_only_its_own_text_and_never_shares_its_counts() -> None:
    """A redactor remembers short texts it redacted (a search redacts its query several
    times): the same text gives the same answer, a look-alike is redacted afresh, a
    caller mutating the counts it got cannot change the next answer, and a redactor with
    other rules remembers nothing of another's."""
    case = secret_cases()[0]
    query = f"why does this fail: {case.text}"
    redactor = SecretRedactor()
    first, counts = redactor.redact(query)
    assert all(payload.lower() not in first.lower() for payload in case.payloads)
    counts.clear()
    again, counts_again = redactor.redact(query)
    assert again == first
    assert sum(counts_again.values()) >= 1
    benign = "why does GITHUB_TOKEN rotation fail"
    assert redactor.redact(benign) == (benign, Counter())
    with_mail = SecretRedactor(emails=True)
    mail = "page oncall@example.org about it"
    assert SecretRedactor().redact(mail)[0] == mail
    assert "oncall@example.org" not in with_mail.redact(mail)[0]


# -- which rules run: the hint index ---------------------------------------------------------


def _each_rule_in_turn(rules: list[Rule], text: str, findings: Counter[str]) -> str:
    """The reference the hint index must agree with: each rule asked in turn whether the
    text holds one of its hints (lower-case ones ignoring case, in the text as given; the
    others in the text as the rules before left it)."""
    lowered = text.lower()
    for rule in rules:
        folded = [hint for hint in rule.hints if hint.islower()]
        cased = [hint for hint in rule.hints if not hint.islower()]
        if not rule.hints or any(h in lowered for h in folded) or any(h in text for h in cased):
            text = rule.apply(text, findings)
    return text


def _rule(kind: str, pattern: str, replacement: str, *hints: str) -> PatternRule:
    return PatternRule(kind, re.compile(pattern), lambda _match: replacement, hints)


def test_a_rule_runs_on_what_the_rules_before_it_left() -> None:
    # One rule's replacement brings a later rule's case-sensitive hint in, another's takes
    # one away: the later rules are asked about the text as it is when their turn comes.
    rules = [
        _rule("brings", r"alpha", "BRAVO", "alpha"),
        _rule("takes", r"DELTA", "gone", "delta"),
        _rule("needs_bravo", r"BRAVO", "charlie", "BRAVO"),
        _rule("needs_delta", r"\w+", "Z", "DELTA"),
        _rule("always", r"echo", "ECHO"),
    ]
    for text in ("alpha DELTA echo", "DELTA", "alpha", "ALPHA delta", "nothing here", "BRAVO DELTA"):
        expected_findings: Counter[str] = Counter()
        expected = _each_rule_in_turn(rules, text, expected_findings)
        findings: Counter[str] = Counter()
        assert _HintedRules(rules).apply(text, findings) == expected, text
        assert findings == expected_findings, text
    assert _HintedRules(rules).apply("alpha DELTA echo", Counter()) == "charlie gone ECHO"


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_hint_index_runs_the_rules_each_rule_in_turn_would(data: st.DataObject) -> None:
    # Texts made of the real rules' hints (in any case), values of key-like lengths and
    # separators: the index and the rule-by-rule test agree on the text and the findings.
    redactor = SecretRedactor(emails=True, phone_numbers=True)
    for tests in (redactor._tests, redactor._whole_tests):
        rules = list(tests._rules)
        hints = sorted({hint for rule in rules for hint in rule.hints})
        piece = st.one_of(
            st.sampled_from(hints),
            st.sampled_from(hints).map(str.upper),
            st.text(alphabet="abcdefXYZ0123456789+/", min_size=8, max_size=44),
            st.sampled_from(["=", ": ", " ", "\n", "://", "@", "'", '"']),
            st.sampled_from(["user@example.org", "+1 415 555 0134"]),
        )
        text = "".join(data.draw(st.lists(piece, max_size=14)))
        expected_findings: Counter[str] = Counter()
        expected = _each_rule_in_turn(rules, text, expected_findings)
        findings: Counter[str] = Counter()
        assert tests.apply(text, findings) == expected
        assert findings == expected_findings
