"""Planted credentials, each built at run time from parts that say they are fake."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from lore.testing.attacks.case import PlantedCase


def _b64url(data: Mapping[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def secret_cases() -> list[PlantedCase]:
    """Fake credentials, each built from parts that say they are fake."""
    aws_key_id = "AKIA" + "EXAMPLE" + "FAKEKEY99"
    aws_secret = "Fake" + "0EXAMPLE0" * 4
    ghp = "ghp_" + "x" * 36
    github_pat = "github_pat_" + "x" * 22 + "_" + "y" * 59
    glpat = "glpat-" + "x" * 20
    slack = "xoxb-" + "0" * 12 + "-" + "x" * 24
    webhook = "https://hooks.slack.com/services/T" + "0" * 8 + "/B" + "0" * 8 + "/" + "FakeHook" + "0" * 16
    jwt = _b64url({"alg": "none", "typ": "JWT"}) + "." + _b64url({"sub": "fake-user"}) + ".fakesignature"
    key_body = "FAKEKEYMATERIAL" * 5
    pem = "-----BEGIN " + "PRIVATE KEY-----\n" + key_body + "\n-----END " + "PRIVATE KEY-----"
    bearer = "fake0token0" * 3
    url_password = "fakepass" + "123"
    db_password = "fakedbpw" + "456"
    pair_password = "fake-pass-" + "789"
    api_token = "fAkE" + "0123456789" + "aBcDeF"
    salt = "q8Zr2LmX" + "9vB4nT7k" + "P1sW6yHc"

    def case(name: str, kind: str, text: str, payload: str) -> PlantedCase:
        return PlantedCase(name, kind, text, (payload,))

    return [
        case("aws_access_key_id", "aws_access_key_id", f"export AWS_ACCESS_KEY_ID={aws_key_id}", aws_key_id),
        case("aws_secret_key", "aws_secret_access_key", f"aws_secret_access_key = {aws_secret}", aws_secret),
        case("github_classic", "github_token", f"export GITHUB_TOKEN={ghp}", ghp),
        case("github_pat", "github_token", f"GH_TOKEN is {github_pat}", github_pat),
        case("gitlab_pat", "gitlab_token", f"Use {glpat} for the registry.", glpat),
        case("slack_bot_token", "slack_token", f"SLACK bot: {slack}", slack),
        case("slack_webhook", "slack_webhook", f"Alerts post to {webhook}", webhook),
        case("jwt", "jwt", f"A session looked like {jwt} in the logs.", jwt),
        case("private_key", "private_key", f"Deploy key:\n\n{pem}\n", key_body[:30]),
        case("bearer", "bearer_token", f"curl -H 'Authorization: Bearer {bearer}' ...", bearer),
        case("url_password", "url_password", f"git remote add ops https://deploy:{url_password}@git.internal/x",
             url_password),
        case("db_dsn", "db_connection_string", f"DSN postgresql://app:{db_password}@db.internal:5432/orders",
             db_password),
        case("password_pair", "password", f"DB_PASSWORD={pair_password}", pair_password),
        case("token_pair", "secret", f"api_token: {api_token}", api_token),
        case("high_entropy", "high_entropy", f"signing_salt={salt}", salt),
        *vendor_and_prose_secret_cases(),
        *prose_credential_cases(),
        *context_secret_cases(),
    ]  # fmt: skip


# -- secrets in prose, vendor formats and command lines (issue 10) ------------------------


def vendor_and_prose_secret_cases() -> list[PlantedCase]:
    """Formats that once reached the agent: vendor tokens written in prose, key material
    under non-credential key names, passwords on command lines and in sentences."""
    openai_key = "sk-" + "proj-" + "FAKE" + "x" * 40 + "T3st" + "0" * 20
    anthropic_key = "sk-" + "ant-" + "api03-" + "FAKE" + "x" * 88 + "AA"
    stripe_key = "sk_" + "live_" + "FAKE" + "0" * 95
    npm_token = "npm_" + "FAKE" + "x" * 32
    google_key = "AI" + "za" + "FAKE" + "x" * 31
    app_key = "dead" + "beef" * 7 + "0000"
    signing_key = base64.b64encode(bytes(range(7, 39))).decode()
    mysql_password = "FakeMy" + "Sql" + "123"
    curl_password = "fakeCurl" + "456"
    sshpass_password = "fakeSsh" + "789"
    pg_password = "fakePg" + "321"
    prose_password = "Fake" + "Temp" + "2024!"

    def case(name: str, kind: str, text: str, payload: str) -> PlantedCase:
        return PlantedCase(name, kind, text, (payload,))

    return [
        case("openai_project_key", "openai_api_key", f"The bot uses {openai_key} until rotation.",
             openai_key),
        case("anthropic_key", "anthropic_api_key", f"Anthropic key for the summariser: {anthropic_key}",
             anthropic_key),
        case("stripe_live_key", "stripe_key", f"Billing calls Stripe with {stripe_key} in prod.",
             stripe_key[-40:]),
        case("npm_token", "npm_token", f"Publish with the npm token {npm_token} from the vault.", npm_token),
        case("google_api_key", "google_api_key", f"Maps requests carry key {google_key}.", google_key),
        case("app_key_hex", "key_material", f"PAYMENTS_APP_KEY={app_key}", app_key),
        case("signing_key_b64", "key_material", f"WEBHOOK_SIGNING_KEY: {signing_key}", signing_key),
        case("mysql_cli", "password", f"mysql -h db.internal -u root -p{mysql_password} orders",
             mysql_password),
        case("curl_user", "password", f"curl -u deploy:{curl_password} https://ci.internal/api/v1/jobs",
             curl_password),
        case("sshpass_cli", "password", f"sshpass -p {sshpass_password} ssh ops@bastion.internal",
             sshpass_password),
        case("pgpassword_env", "password", f"PGPASSWORD={pg_password} psql -h db.internal orders",
             pg_password),
        case("prose_password", "password",
             f"The temporary password is {prose_password} and must be changed at first login.",
             prose_password),
    ]  # fmt: skip


def prose_credential_cases() -> list[PlantedCase]:
    """Credentials named in a sentence under other names than "password", and passwords
    in sentences in other languages."""
    #: Random-looking base64 of made-up bytes, the shape of a cloud secret key.
    secret_key = base64.b64encode(bytes(range(41, 71))).decode()
    api_token = base64.b64encode(bytes(range(121, 145))).decode()
    hex_key = "feed" + "face" * 7 + "0000"
    passwords = {name: "Fake" + name.title()[:4] + "2024x" for name in
                 ("french", "german", "spanish", "portuguese", "italian", "russian", "chinese",
                  "japanese", "korean", "dutch", "polish", "turkish")}  # fmt: skip

    def case(name: str, kind: str, text: str, payload: str) -> PlantedCase:
        return PlantedCase(name, kind, text, (payload,))

    pw = passwords
    return [
        case("prose_cloud_secret_key", "secret",
             f"For the audit bucket the cloud secret key is {secret_key}.", secret_key),
        case("prose_api_token", "secret", f"The API token for the status page was set to {api_token}",
             api_token),
        case("prose_client_secret", "secret", f'The OAuth client secret is "{secret_key}" until Friday.',
             secret_key),
        case("prose_hex_api_key", "secret", f"Our metrics API key is {hex_key} (rotate after the incident).",
             hex_key),
        case("prose_api_key_french", "secret", f"La clé API du registre est {secret_key}.", secret_key),
        case("prose_api_key_japanese", "secret", f"本番のAPIキーは{api_token}です。", api_token),
        case("prose_password_french", "password", f"Le mot de passe temporaire est {pw['french']}.",
             pw["french"]),
        case("prose_password_german", "password", f"Das Passwort für den Jumphost lautet {pw['german']}",
             pw["german"]),
        case("prose_password_spanish", "password", f"La contraseña de la réplica es {pw['spanish']}",
             pw["spanish"]),
        case("prose_password_portuguese", "password", f"A senha do painel é {pw['portuguese']}.",
             pw["portuguese"]),
        case("prose_password_italian", "password", f"La password del bastione è {pw['italian']}",
             pw["italian"]),
        case("prose_password_russian", "password", f"Пароль от консоли — {pw['russian']}", pw["russian"]),
        case("prose_password_chinese", "password", f"跳板机的密码是{pw['chinese']}，请勿外传。",
             pw["chinese"]),
        case("prose_password_japanese", "password", f"踏み台のパスワードは{pw['japanese']}です。",
             pw["japanese"]),
        case("prose_password_korean", "password", f"관리자 비밀번호는 {pw['korean']}입니다.", pw["korean"]),
        case("prose_password_dutch", "password", f"Het wachtwoord van de database is {pw['dutch']}",
             pw["dutch"]),
        case("prose_password_polish", "password", f"Hasło do konsoli to {pw['polish']}", pw["polish"]),
        case("prose_password_turkish", "password", f"Yönetici şifresi: {pw['turkish']}", pw["turkish"]),
    ]  # fmt: skip


# -- the credential-context grammar (issue 32) ---------------------------------------------


def context_secret_cases() -> list[PlantedCase]:
    """One case per format of ``lore.safety.secret_context`` and per vendor prefix that
    had no rule: credential files, command lines, headers, encodings, layouts. (Places a
    search never returns, front matter and HTML comments, are checked at rest and in the
    reader: ``tests/test_secret_context.py``, ``tests/test_entry_points_secrets_http.py``.)
    ``SECRET_LOOKALIKES`` holds the benign text beside each that must survive."""
    fake = "Fake"
    netrc_pw, pgpass_pw, oracle_pw = fake + "Netrc" + "9pw", fake + "Pgpass" + "9pw", fake + "Tiger" + "9pw"
    k8s_pw, string_data, short_pw = fake + "K8sEnv" + "9pw", "not" + "random" + "fake", fake + "Short" + "9!"
    ppk_line = "AAAAgFAKE" + "PPKPRIVATE" * 4
    ppk_mac = "fa4e" + "0" * 36
    sqlcmd_pw, ldap_pw = fake + "Sqlcmd" + "9pw", fake + "Ldap" + "9pw"
    aws_pw = fake + "AwsCfg" + "0123456789"
    gpg_pw, stdin_pw = fake + "Gpg" + "9phrase", fake + "Stdin" + "9pw"
    token_hdr, splunk_hdr = "fake" + "0123456789" + "abcdef", "fake" + "5p1unk" + "0123456789"
    json_url_pw, pct_url_pw, dsn_pw = fake + "Json" + "9pw", fake + "Pct" + "9pw", fake + "Dsn" + "9pw"
    sas_sig = "fAkE0" + "sIg" + "%2B" + "0123456789abcd" + "%3D"
    table_pw, cont_tail = fake + "Table" + "9pw", "Fake" + "Tail" + "0123456789"
    cont_head = "Fake" + "Head" + "0123456789abcd"
    output_tok = fake + "Output" + "Tok3n" + "0123456789"
    docker_pass = "fake" + " passphrase " + "horse"
    docker_auth = base64.b64encode(f"deploy:{docker_pass}".encode()).decode()
    dckr = "dckr_" + "pat_" + "FAKE" + "x" * 23
    legacy_vault = "s." + "FAKE" + "fake" + "0123456789" + "abcdef"
    square = "sq0" + "atp-" + "FAKE" + "x" * 18
    sql_pw = fake + "Sql" + "Role9"
    entity_pw, unicode_pw = fake + "Entity" + "9pw", fake + "Unicode" + "9pw"
    encoded_ghp = "ghp_" + "FAKE" + "0a1b2c3d4e5f" * 2 + "6g7h9ijk"

    def case(name: str, kind: str, text: str, payload: str) -> PlantedCase:
        return PlantedCase(name, kind, text, (payload,))

    return [
        case("netrc", "password",
             f"```\nmachine git.internal\n  login deploy\n  password {netrc_pw}\n```", netrc_pw),
        case("pgpass", "password",
             f"`~/.pgpass`:\n\n```\ndb.internal:5432:orders:app:{pgpass_pw}\n```", pgpass_pw),
        case("putty_ppk", "private_key",
             "```\nPuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nComment: fake\n"
             "Public-Lines: 1\nAAAAB3Nza\n"
             f"Private-Lines: 2\n{ppk_line}\n{ppk_line}\nPrivate-MAC: {ppk_mac}\n```", ppk_line),
        case("oracle_tns", "password",
             f"Connect with `sqlplus scott/{oracle_pw}@orclpdb` from the bastion.", oracle_pw),
        case("k8s_env_pair", "password",
             f"```yaml\nenv:\n  - name: DB_PASSWORD\n    value: {k8s_pw}\n```", k8s_pw),
        case("k8s_string_data", "password",
             f"```yaml\nkind: Secret\nstringData:\n  username: app\n  dbpass: {string_data}\n```",
             string_data),
        case("short_key", "password", f"```\nuser: ops\npass: {short_pw}\n```", short_pw),
        case("sqlcmd", "password", f"`sqlcmd -S db01 -U sa -P {sqlcmd_pw} -Q \"select 1\"`", sqlcmd_pw),
        case("ldapsearch", "password",
             f"`ldapsearch -x -D cn=admin,dc=corp -w {ldap_pw} -b dc=corp`", ldap_pw),
        case("aws_configure_set", "password", f"`aws configure set aws_secret_access_key {aws_pw}`", aws_pw),
        case("gpg_passphrase", "password", f"`gpg --batch --passphrase {gpg_pw} -d backup.gpg`", gpg_pw),
        case("password_stdin", "password",
             f"`echo {stdin_pw} | docker login -u ci --password-stdin`", stdin_pw),
        case("auth_token_scheme", "http_credential",
             f"`curl -H 'Authorization: Token {token_hdr}' …`", token_hdr),
        case("auth_splunk_scheme", "http_credential",
             f"`-H \"Authorization: Splunk {splunk_hdr}\"`", splunk_hdr),
        case("json_escaped_url", "url_password",
             f'`{{"dsn": "https:\\/\\/app:{json_url_pw}@db.internal\\/orders"}}`', json_url_pw),
        case("percent_encoded_url", "url_password",
             f"`?next=https%3A%2F%2Fapp%3A{pct_url_pw}%40db.internal`", pct_url_pw),
        case("dsn_query_password", "password",
             f"`postgresql://db.internal/orders?user=app&password={dsn_pw}&sslmode=require`", dsn_pw),
        case("percent_encoded_signature", "url_credential",
             f"`https://store.example/c/b?sv=2022-11-02&sig={sas_sig}&se=2030`", sas_sig),
        case("table_column", "password",
             f"| host | user | password |\n|---|---|---|\n| db01 | app | `{table_pw}` |", table_pw),
        case("continued_line", "password",
             f"```\nexport DB_PASSWORD={cont_head}\\\n{cont_tail}\n```", cont_tail),
        case("bare_output_line", "password",
             f"```\n$ vault token create -field=token\n{output_tok}\n```", output_tok),
        case("docker_auths_passphrase", "password",
             f'`{{"auths": {{"registry.internal": {{"auth": "{docker_auth}"}}}}}}`', docker_auth),
        case("sql_password", "password", f"`ALTER ROLE replicator WITH LOGIN PASSWORD '{sql_pw}';`", sql_pw),
        case("entity_escaped_key", "password", f"<code>&#112;assword: {entity_pw}</code>", entity_pw),
        case("json_unicode_escaped_key", "password", f'`{{"pass\\u0077ord": "{unicode_pw}"}}`', unicode_pw),
        case("percent_encoded_token", "github_token",
             f"`/login?next=%2Fcb%3Ftoken%3D{encoded_ghp}`", encoded_ghp),
        case("docker_hub_pat", "docker_hub_token", f"`docker login -u ci -p {dckr}`", dckr),
        case("legacy_vault_token", "vault_token",
             f"The root token was {legacy_vault} until the re-key.", legacy_vault),
        case("square_token", "square_token", f"Square sandbox: {square}", square),
    ]  # fmt: skip


#: The benign text beside each context case: must pass redaction unchanged.
SECRET_LOOKALIKES: tuple[str, ...] = (
    "The fix landed in commit 3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3.",
    "Request 550e8400-e29b-41d4-a716-446655440000 timed out after 30s.",
    "image: registry.internal/api@sha256:" + "ab12" * 16,
    "password:\n  # set from Vault at deploy time",
    "Connect with `psql -h db01 -p 5432 -U app orders` (it prompts for the password).",
    "```\nmachine git.internal\n  login deploy\n```",
    "```yaml\nenv:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db-creds\n```",
    "| setting | password policy |\n|---|---|\n| length | 16 characters |",
    "`echo \"$REGISTRY_TOKEN\" | docker login -u ci --password-stdin`",
    "`curl -H 'Authorization: Bearer $TOKEN' https://api.internal/v1/health`",
    "`aws configure set region eu-west-1`",
    "`ssh -p 2222 ops@bastion` then `redis-cli -p 6379 ping`",
    "```\n$ git rev-parse HEAD\n3f2a9c1b4d5e6f708192a3b4c5d6e7f809a1b2c3\n```",
    "The window opens at 10:30:00 and closes at 11:00:00.",
    "Authorization: required for every call to the admin API.",
    "`docker build --secret id=npm,src=$HOME/.npmrc .`",
    "```\n$ kubectl create secret generic app-config \\\n    --from-literal=key=value\n```",
    "`ALTER ROLE replicator WITH LOGIN PASSWORD NULL;`",
    "?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=ops%40proj-1.iam.example%2F20200130%2Fauto%2Fstorage",
)
