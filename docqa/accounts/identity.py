"""The authenticated caller and the access scope the server derives from it (never from request bodies)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from docqa.access import AccessScope

if TYPE_CHECKING:
    from docqa.accounts.models import User


def user_principal(user_id: str) -> str:
    return f"user:{user_id}"


def group_principal(group: str) -> str:
    return f"group:{group}"


@dataclass(frozen=True)
class Caller:
    """Who is calling: resolved from an API key on every request."""

    user_id: str
    tenant: str
    role: str
    groups: frozenset[str] = field(default_factory=frozenset)
    key_id: str = ""

    @classmethod
    def of_user(cls, user: User, key_id: str) -> Caller:
        """The caller for a directory user, authenticated by `key_id` (an API key id, or `oidc:<tenant>:<user>`)."""
        return cls(user_id=user.id, tenant=user.tenant_id, role=user.role,
                   groups=frozenset(g.name for g in user.groups), key_id=key_id)

    def scope(self) -> AccessScope:
        """Documents readable by this caller: their own principal, their groups', and `everyone` in the tenant."""
        principals = {user_principal(self.user_id), *(group_principal(g) for g in self.groups)}
        return AccessScope(tenant=self.tenant, principals=frozenset(principals))
