"""Credentials given in prose: passwords in the languages screening covers, and keys,
tokens and secrets named in a sentence. Values are assembled at run time from parts that
say they are fake."""

from __future__ import annotations

import base64

import pytest

from lore.safety.secrets import redact_secrets

FAKE_PASSWORD = "Fake" + "Pw" + "2024x"
#: 40 characters of base64 (of the bytes 7..36: random-looking, plainly made up), the
#: shape of an AWS secret access key.
FAKE_KEY = base64.b64encode(bytes(range(7, 37))).decode()
FAKE_HEX = "deadbeef" * 4
#: Typed by a person, not generated: a digit, letters and symbols no resource name has.
FAKE_TYPED = "Fake" + "#" + "9x" + "$" + "Pw"

FIRES: list[tuple[str, str]] = [
    # (text, the secret in it)
    (f"the aws secret access key is {FAKE_KEY}", FAKE_KEY),
    (f"The API token for the staging tenant is {FAKE_KEY}.", FAKE_KEY),
    (f'the client secret is "{FAKE_KEY}"', FAKE_KEY),
    (f"Our webhook signing key was rotated to {FAKE_KEY} yesterday", FAKE_KEY),
    (f"the datadog api key is {FAKE_HEX}", FAKE_HEX),
    (f"The bot token is `{FAKE_KEY}`", FAKE_KEY),
    (f"our shared secret is `{FAKE_TYPED}`", FAKE_TYPED),
    (f'the client secret for the test app is "{FAKE_TYPED}!"', FAKE_TYPED),
    (f"The service account key reads {FAKE_KEY}", FAKE_KEY),
    (f"le mot de passe est {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Le mot de passe du compte admin : {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Das Passwort lautet {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Das Kennwort für die Datenbank ist {FAKE_PASSWORD}.", FAKE_PASSWORD),
    (f"Passwort: {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"La contraseña es {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"A senha do banco é {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"La password del database è {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Пароль от базы — {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"пароль: {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"数据库的密码是{FAKE_PASSWORD}。", FAKE_PASSWORD),
    (f"密碼：{FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"パスワードは{FAKE_PASSWORD}です", FAKE_PASSWORD),
    (f"管理者のパスワード：「{FAKE_PASSWORD}」", FAKE_PASSWORD),
    (f"비밀번호는 {FAKE_PASSWORD}입니다", FAKE_PASSWORD),
    (f"Het wachtwoord is {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Hasło do bazy to {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Şifre: {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"YÖNETİCİ ŞİFRESİ: {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"Lösenordet är {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"le mot de passe est {FAKE_PASSWORD}&3!", FAKE_PASSWORD),
    (f"the password to the replica is {FAKE_PASSWORD}", FAKE_PASSWORD),
    (f"La clé API du fournisseur est {FAKE_KEY}", FAKE_KEY),
    (f"Der API-Schlüssel für Staging lautet {FAKE_KEY}", FAKE_KEY),
    (f"La clave de API es {FAKE_KEY}", FAKE_KEY),
    (f"Klucz API to {FAKE_KEY}", FAKE_KEY),
    (f"Токен доступа — {FAKE_KEY}", FAKE_KEY),
    (f"生产环境的API密钥是{FAKE_KEY}。", FAKE_KEY),
    (f"アクセストークンは{FAKE_KEY}です", FAKE_KEY),
    (f"API 키는 {FAKE_KEY}입니다", FAKE_KEY),
]


@pytest.mark.parametrize(("text", "secret"), FIRES, ids=[text[:40] for text, _ in FIRES])
def test_prose_credential_is_redacted(text: str, secret: str) -> None:
    out = redact_secrets(text)
    assert secret not in out
    assert "[REDACTED:" in out


LOOK_ALIKES = [
    # quoted names and paths after "the secret is": a Secret's name, a file, a placeholder
    "the secret is `payments-db-v2`, mounted at /etc/creds",
    "the signing key is `/etc/keys/sign-2024.pem`",
    "the token is `${GITLAB_TOKEN}` in CI",
    "the shortcut key is `Ctrl+Shift+4`",
    "the token is stored in Vault",
    "The key is rotated monthly.",
    "The signing key is rotated monthly by the cron job.",
    "the API key is in 1Password under payments-prod",
    "The client secret is `payments-api-client` in the k8s namespace.",
    "the secret is called db-creds",
    "The token is 550e8400-e29b-41d4-a716-446655440000 in the logs (a request id).",
    "The access token is valid for 3600 seconds.",
    "the session token is sent as a cookie",
    "The token is a JWT; see docs/auth.md.",
    "The encryption key is /etc/keys/data.key on every node.",
    "The API key is aGVsbG8gd29ybGQgdGhpcyBpcyB0ZXh0 in base64? No: ask the owner.",
    "Das Passwort steht im Vault.",
    "Le mot de passe est dans le coffre-fort.",
    "La contraseña es la misma que en staging.",
    "Пароль: см. Vault.",
    "密码是存储在Vault中的。",
    "パスワードは管理者に聞いてください。",
    "비밀번호는 Vault에 있습니다.",
    "Het wachtwoord is opgeslagen in Vault.",
    "the password is hunter",
    "Le jeton est stocké dans Vault.",
    "Der API-Schlüssel ist im Vault unter payments-prod.",
    "Ключ API хранится в Vault.",
    "APIキーはVaultにあります。",
    "API 키는 Vault에 있습니다.",
    "The password to the db is stored in Vault.",
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_prose_look_alike_is_left_alone(text: str) -> None:
    assert redact_secrets(text) == text
