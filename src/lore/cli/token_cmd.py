"""``lore token create|list|revoke``: the API tokens of ``lore serve`` (docs/service.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from lore.access import Role
from lore.cli.app import app, say, settings
from lore.errors import ConfigError

if TYPE_CHECKING:
    from lore.web.tokens import TokenStore

token_app = typer.Typer(
    help="API tokens for lore serve: create (printed once), list, revoke.", no_args_is_help=True
)
app.add_typer(token_app, name="token")


def _store() -> TokenStore:
    from lore.web.tokens import TokenStore

    return TokenStore(settings().resolved_data_dir())


@token_app.command("create")
def create(
    role: Annotated[str, typer.Option("--role", help="viewer, editor or admin.")],
    name: Annotated[str, typer.Option("--name", help="Who the token is for; shown in the audit log.")],
    groups: Annotated[str, typer.Option("--groups", help="Comma-separated groups, e.g. sre,payments.")] = "",
    tenant: Annotated[str | None, typer.Option("--tenant", help="The tenant the token is bound to.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="The person (email) it stands for.")] = None,
) -> None:
    """Create a token and print it (only once: lore keeps just its hash)."""
    try:
        chosen = Role(role.strip().lower())
    except ValueError as err:
        raise ConfigError(f"--role {role!r}: choose viewer, editor or admin") from err
    wanted = tuple(group.strip() for group in groups.split(",") if group.strip())
    token = _store().create(name, chosen, groups=wanted, tenant=tenant, user=user)
    say(token)


@token_app.command("list")
def list_tokens() -> None:
    """Names, roles, groups and tenants of the tokens (never the tokens themselves)."""
    records = _store().records()
    if not records:
        say("no tokens: lore serve runs unauthenticated on 127.0.0.1 only")
    for record in records:
        groups = ",".join(record.groups) or "-"
        say(
            f"{record.name}  {record.role.value}  groups={groups}  tenant={record.tenant or '-'}  "
            f"user={record.user or '-'}  created {record.created_at}"
        )


@token_app.command("revoke")
def revoke(name: Annotated[str, typer.Argument(help="The token's name.")]) -> None:
    """Revoke a token; a running lore serve refuses it from its next request."""
    _store().revoke(name)
    say(f"revoked {name}")
