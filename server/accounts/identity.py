"""The authenticated caller and the access scope the server derives from it (never from request bodies)."""

from __future__ import annotations

from dataclasses import dataclass, field

from docqa.access import AccessScope


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

    def scope(self) -> AccessScope:
        """Documents readable by this caller: their own principal, their groups', and `everyone` in the tenant."""
        principals = {user_principal(self.user_id), *(group_principal(g) for g in self.groups)}
        return AccessScope(tenant=self.tenant, principals=frozenset(principals))
