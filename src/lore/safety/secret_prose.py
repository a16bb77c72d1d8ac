"""Credentials given in prose: "the temporary password is …", "the AWS secret access key
is …", "le mot de passe est …", "パスワードは…です".

A sentence names no key a ``key = value`` rule could anchor on, so these rules anchor on
the noun (a password, or a key, token or secret qualified as a credential) and a copula,
and then judge the value, because the same sentence shape carries no secret at all:
"the password is stored in Vault", "the token is rotated monthly", "the signing key is in
the HSM". A password is kept when quoted or when it has the shape of one (a digit among
letters, or random-looking); a key, token or secret only when it is key material (long
hex, or random-looking base64), quoted or not, since a quoted word after "the secret is"
is usually a k8s Secret's name.

Written here: detect-secrets' keyword plugin matches ``password = …`` assignments in
code, not sentences, and knows English only; no maintained library finds credentials in
prose. The nouns and copulas cover the languages injection screening covers
(``lore.safety.override_phrases``).
"""

from __future__ import annotations

import re

from lore.safety.lazy_regex import compile_later
from lore.safety.secret_rules import PatternRule, is_key_material, replace_span
from lore.safety.secret_shapes import is_placeholder, looks_random

#: A value in a sentence: quoted, or up to the next blank (shell's ``&``, ``;`` and ``|``
#: end nothing here: "Tr0ub4dor&3" is one password).
VALUE = r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|`(?P<bq>[^`\n]+)`|(?P<bare>[^\s"'`]+))"""
_PASSWORD = r"password|passphrase|passwd|passcode"
#: "password" in the other languages operations teams write in.
_FOREIGN_PASSWORD = (
    r"mot[ \t]de[ \t]passe|passwort|kennwort|contrase[ñn]a|senha|parola[ \t]d'ordine|wachtwoord"
    r"|has[łl]o|has[łl]a|[şs]ifre(?:si)?|parola(?:s[ıi])?|l[öo]senord(?:et)?|heslo|kata[ \t]sandi"
    r"|m[ậa]t[ \t]kh[ẩa]u"
    r"|пароль|пароля"
)
#: "is" and its kin after the noun, longest first ("was reset to X" must not stop at "was").
_COPULAS = r"(?:(?:has[ \t]been|was|is)[ \t]+)?(?:set|changed|reset|rotated)[ \t]to|will[ \t]be|is|was"
#: The same in other languages, none of them an English word that could follow
#: "password" (Italian and Spanish write "la password è / es"). Russian often has no verb
#: at all: "пароль — X".
_OTHER_COPULAS = (
    r"est|[ée]tait|sera|lautet|lautete|ist|war|es|era|ser[áa]|é|è|luidt|[äa]r|jest|brzmi|adalah|ialah|là"
    r"|это|—|–"
)
#: Copulas that are English words too (Polish "to", Czech "je"): after a foreign noun only,
#: or "the password to the db is X" would stop at "to" and miss the value.
_FOREIGN_ONLY_COPULAS = r"to|je"
_PROSE_PASSWORD = compile_later(
    # the noun, up to 40 characters of qualifier ("for the staging db"), the copula, the value
    rf"(?<!\w)(?:{_PASSWORD})(?!\w)[^\n.:=]{{0,40}}?[ \t](?:{_COPULAS}|{_OTHER_COPULAS})"
    rf"[ \t]*:?[ \t]+{VALUE}",
    re.IGNORECASE,
)
_PROSE_PASSWORD_FOREIGN = compile_later(
    rf"(?<!\w)(?:{_FOREIGN_PASSWORD})(?!\w)(?:[^\n.:=]{{0,40}}?[ \t]"
    rf"(?:{_COPULAS}|{_OTHER_COPULAS}|{_FOREIGN_ONLY_COPULAS})[ \t]*:?[ \t]+"
    # or a colon straight after a foreign noun ("Passwort: X"; English "password: X" is a
    # key = value pair, which the keyed rule redacts whatever the value)
    rf"|[^\n.:=]{{0,40}}?[:：][ \t]*){VALUE}",
    re.IGNORECASE,
)
#: In Chinese, Japanese and Korean the value follows the noun and a particle with no
#: space and is followed by more text ("パスワードはHunter2です"): the value is the run of
#: ASCII after the particle, quoted in 「」 or not.
_CJK_VALUE = r"""(?:「(?P<cq>[^」\n]+)」|"(?P<dq>[^"\n]+)"|`(?P<bq>[^`\n]+)`|(?P<bare>(?:(?!["'`])[!-~])+))"""
_PROSE_PASSWORD_CJK = compile_later(
    r"(?:密码|密碼|口令|パスワード|暗証番号|비밀번호|패스워드|암호)[^\n。:：]{0,20}?"
    rf"(?:是|为|為|は|는|은|[:：])[ \t]*{_CJK_VALUE}"
)
#: A credential other than a password: a key, token or secret qualified as one ("the AWS
#: secret access key", "the API token", "the client secret", "the webhook signing key").
_QUALIFIER = (
    r"api|access|secret|signing|private|auth(?:entication|orization)?|client|encryption|decryption|master"
    r"|root|deploy(?:ment)?|licen[cs]e|app(?:lication)?|webhook|hmac|session|bearer|refresh|bot"
    r"|service[ \t-]account|personal[ \t-]access|integration|ingest(?:ion)?|admin|shared|pre-?shared"
    r"|consumer|sas|storage(?:[ \t-]account)?|account|recovery|vault|registry|oauth2?|ssh|gpg|pgp"
)
_CREDENTIAL = compile_later(
    rf"(?<!\w)(?:(?:{_QUALIFIER})[ \t-]+(?:(?:access|api|signing)[ \t-]+)?(?:key|token|secret)"
    rf"|api[-_]?key|token|secret)(?!\w)[^\n.:=]{{0,40}}?[ \t](?:{_COPULAS}|reads)[ \t]*:?[ \t]+{VALUE}",
    re.IGNORECASE,
)

#: The same in the other languages: "la clé API est …", "der API-Schlüssel lautet …",
#: "ключ API: …", "API密钥是…", "APIキーは…". Their own nouns for key, token and secret
#: are qualified as the English ones are, or (token, secret key) name a credential alone.
_FOREIGN_CREDENTIAL_NOUNS = (
    r"cl[ée][ \t]+(?:d'|de[ \t]+l')?(?:api|secr[èe]te|priv[ée]e|d'acc[èe]s|de[ \t]+signature)"
    r"|jeton(?:[ \t]+d'acc[èe]s)?"
    r"|(?:api|zugangs|geheim|signatur|privat)-?schl[üu]ssel|zugangstoken"
    r"|clave[ \t]+(?:de[ \t]+)?(?:api|secreta|privada|de[ \t]+acceso)"
    r"|chave[ \t]+(?:de[ \t]+)?(?:api|secreta|privada|de[ \t]+acesso)"
    r"|chiave[ \t]+(?:api|segreta|privata|di[ \t]+accesso)"
    r"|(?:api-?)?sleutel|geheime[ \t]+sleutel|klucz[ \t]+(?:api|prywatny|tajny|dost[ęe]pu)"
    r"|gizli[ \t]+anahtar|api[ \t]+anahtar[ıi]"
    r"|(?:секретный|приватный|закрытый)[ \t]+ключ|ключ[ \t]+(?:api|доступа)|токен(?:[ \t]+доступа)?"
)
_FOREIGN_CREDENTIAL = compile_later(
    rf"(?<!\w)(?:{_FOREIGN_CREDENTIAL_NOUNS})(?!\w)(?:[^\n.:=]{{0,40}}?[ \t]"
    rf"(?:{_COPULAS}|{_OTHER_COPULAS}|{_FOREIGN_ONLY_COPULAS})[ \t]*:?[ \t]+"
    rf"|[^\n.:=]{{0,40}}?[:：][ \t]*){VALUE}",
    re.IGNORECASE,
)
_CJK_CREDENTIAL = compile_later(
    r"(?:API[ \t]?(?:密钥|密鑰|キー|키)|(?:访问|訪問|私有|秘密)?(?:密钥|密鑰)|令牌"
    r"|アクセス[ \t]?(?:キー|トークン)|トークン|シークレット(?:キー)?|秘密鍵"
    r"|비밀[ \t]?키|액세스[ \t]?(?:키|토큰)|토큰)[^\n。:：]{0,20}?"
    rf"(?:是|为|為|は|는|은|[:：])[ \t]*{_CJK_VALUE}",
    re.IGNORECASE,
)


def _value(match: re.Match[str]) -> tuple[str, str, int, int]:
    """The value's form (``bare`` or a quoted one), the value trimmed of the sentence's
    punctuation, and its span."""
    name = next(name for name, value in match.groupdict().items() if value is not None)
    value = match[name]
    start, end = match.span(name)
    if name == "bare":
        trimmed = value.rstrip(".,;:)!?")
        # "!" often ends a password; keep it when the rest is not a plain word.
        if value.endswith("!") and re.search(r"\d", trimmed):
            trimmed = value.rstrip(".,;:)?")
        end -= len(value) - len(trimmed)
        value = trimmed
    return name, value, start, end


def _password(match: re.Match[str]) -> str | None:
    """X when quoted, or when it holds a digit among letters or looks random ("the
    password is stored in Vault" names none; "hunter2", "Welcome123!" do)."""
    name, value, start, end = _value(match)
    if name == "bare" and (
        len(value) < 6
        or value.startswith(("/", "http", "$"))
        or not (
            (re.search(r"\d", value) and (re.search(r"[^\W\d_]", value) or value.isdigit()))
            or looks_random(value, min_length=12)
        )
    ):
        return None
    if is_placeholder(value) or len(value.split()) > 4:
        return None
    return replace_span("password", match, start, end)


#: A quoted value a person typed as a secret: no blank, a digit among letters, and a
#: symbol no resource name has (k8s names hold only ``-`` and ``.``): "`Zq8#mK2$vL9p`".
_TYPED_SECRET = compile_later(r"(?=[^\s]*\d)(?=[^\s]*[^\W\d_])(?=[^\s]*[^\w\s.\-])[^\s]{8,}")


def _credential(match: re.Match[str]) -> str | None:
    name, value, start, end = _value(match)
    if is_placeholder(value):
        return None
    typed = name != "bare" and _TYPED_SECRET.fullmatch(value) and not re.search(r"[/\\]", value)
    if not is_key_material(value) and not typed:
        return None
    return replace_span("secret", match, start, end)


_FOREIGN_HINTS = (
    "pass", "wort", "contrase", "senha", "parola", "wachtwoord", "hasł", "hasl", "ifre", "senord", "heslo",
    "sandi", "khẩu", "khau", "пароль", "пароля",
    "i\u0307fre",  # "ŞİFRE" lowered: the İ becomes i and a combining dot
)  # fmt: skip
_FOREIGN_CREDENTIAL_HINTS = (
    "clé", "jeton", "schlüssel", "schlussel", "zugangstoken", "clave", "chave", "chiave", "sleutel", "klucz",
    "anahtar", "ключ", "токен",
)  # fmt: skip
_CJK_CREDENTIAL_HINTS = ("密钥", "密鑰", "キー", "키", "令牌", "トークン", "シークレット", "秘密鍵", "토큰")
_CJK_HINTS = ("密码", "密碼", "口令", "パスワード", "暗証番号", "비밀번호", "패스워드", "암호")


def prose_rules() -> list[PatternRule]:
    return [
        PatternRule("password", _PROSE_PASSWORD, _password, ("pass",)),
        PatternRule("password", _PROSE_PASSWORD_FOREIGN, _password, _FOREIGN_HINTS),
        PatternRule("password", _PROSE_PASSWORD_CJK, _password, _CJK_HINTS),
        PatternRule("secret", _CREDENTIAL, _credential, ("key", "token", "secret")),
        PatternRule("secret", _FOREIGN_CREDENTIAL, _credential, _FOREIGN_CREDENTIAL_HINTS),
        PatternRule("secret", _CJK_CREDENTIAL, _credential, _CJK_CREDENTIAL_HINTS),
    ]
