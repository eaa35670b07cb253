"""Document access control: every chunk carries its tenant and the principals allowed to read it.

Retrieval always runs with a filter built from the caller's identity on the server side, never from model
output. Documents store principals as a list in `meta.access`; the `in` operator matches when any listed
principal is among the caller's (Elasticsearch `terms` semantics, mirrored by the embedded store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TENANT_FIELD = "tenant"
ACCESS_FIELD = "access"
EVERYONE = "everyone"


@dataclass(frozen=True)
class AccessScope:
    """Who is asking: a tenant and the principals (user id, groups) whose documents they may read."""

    tenant: str
    principals: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.tenant:
            raise ValueError("an access scope needs a tenant")

    @property
    def effective_principals(self) -> list[str]:
        return sorted(self.principals | {EVERYONE})

    def to_filters(self) -> dict[str, Any]:
        return {
            "operator": "AND",
            "conditions": [
                {"field": f"meta.{TENANT_FIELD}", "operator": "==", "value": self.tenant},
                {"field": f"meta.{ACCESS_FIELD}", "operator": "in", "value": self.effective_principals},
            ],
        }


def restrict(scope: AccessScope, filters: dict[str, Any] | None) -> dict[str, Any]:
    """Combine the caller's access filter with optional extra filters; the access part can never be dropped."""
    access = scope.to_filters()
    if not filters:
        return access
    return {"operator": "AND", "conditions": [*access["conditions"], filters]}


def _required_conditions(filters: dict[str, Any]) -> list[dict[str, Any]]:
    # Conditions every match must meet: the filter itself, or the members of an AND, nested ANDs included (a
    # strategy narrows docqa's filters by AND-ing them with its own, e.g. a record window).
    if filters.get("operator") != "AND":
        return [filters]
    found: list[dict[str, Any]] = []
    for condition in filters.get("conditions") or []:
        if isinstance(condition, dict):
            found.extend(_required_conditions(condition))
    return found


def tenant_of(filters: dict[str, Any] | None) -> str | None:
    """The tenant docqa's access filters (`restrict`) name: a `meta.tenant ==` condition every match must meet
    (at the top level or in nested ANDs).

    None when there is none or when two disagree (such filters match nothing anyway). Components use it to pick
    per-tenant resources (topic models), so the tenant comes from the server-built scope, never from the caller.
    """
    if not filters:
        return None
    tenants = {c.get("value") for c in _required_conditions(filters)
               if c.get("field") == f"meta.{TENANT_FIELD}" and c.get("operator") == "=="}
    if len(tenants) != 1:
        return None
    tenant = tenants.pop()
    return tenant if isinstance(tenant, str) and tenant else None


def validate_access_meta(meta: dict[str, Any]) -> None:
    """Reject documents without access-control metadata: nothing is ever stored open."""
    tenant = meta.get(TENANT_FIELD)
    access = meta.get(ACCESS_FIELD)
    if not isinstance(tenant, str) or not tenant:
        raise ValueError("document has no tenant in its access-control metadata")
    if not isinstance(access, list) or not access or not all(isinstance(p, str) and p for p in access):
        raise ValueError("document has no allowed principals in its access-control metadata")


COLLECTION_FIELD = "collection"
# Documents ingested before collections existed carry no `collection`: they are the main collection.
DEFAULT_COLLECTION = "main"


def collection_filter(collection: str) -> dict[str, Any]:
    """Documents of one collection; for the default one also documents without a `collection` meta.

    Only ever AND'ed with the caller's access filter (`restrict`), never a replacement for it.
    """
    if not collection:
        raise ValueError("a collection name is required")
    condition = {"field": f"meta.{COLLECTION_FIELD}", "operator": "==", "value": collection}
    if collection != DEFAULT_COLLECTION:
        return condition
    missing = {"field": f"meta.{COLLECTION_FIELD}", "operator": "==", "value": None}
    return {"operator": "OR", "conditions": [condition, missing]}


def readable_ids(store: Any, scope: AccessScope, ids: list[str]) -> set[str]:
    """Which of `ids` the scope may read now, asked of the document store with the scope's filters.

    Used where something stored earlier (a conversation's citations) names documents: the access list may have
    changed or the document been deleted since, so visibility is checked again at read time, never cached.
    """
    wanted = sorted({i for i in ids if isinstance(i, str) and i})
    if not wanted:
        return set()
    found = store.filter_documents(filters=restrict(scope, {"field": "id", "operator": "in", "value": wanted}))
    return {doc.id for doc in found}
