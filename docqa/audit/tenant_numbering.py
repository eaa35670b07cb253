"""Per-tenant numbering of chain links: a tenant's traces are 1, 2, 3, ... and so are its events.

The chain's `seq` numbers every tenant's links together, so its gaps would tell one tenant's auditors how much
the others did; they see `tenant_seq` instead, and operators keep `seq` to verify the chain. A number is taken
under the chain lock, in the transaction that appends the link, so numbers follow the chain order without gaps
or duplicates (a unique index on (tenant, tenant_seq) backs this up).

Usage (inside `lock_chain`, as `chain.append_link` does):
    trace.tenant_seq = next_tenant_seq(session, trace.tenant, TRACE)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from docqa.audit.models import AuditTenantCounter

TRACE = "trace"
EVENT = "event"


def next_tenant_seq(session: Session, tenant: str, kind: str) -> int:
    """The next number of `tenant`'s links of `kind` (TRACE or EVENT); the caller holds the chain lock."""
    if kind not in (TRACE, EVENT):
        raise ValueError(f"unknown link kind {kind!r}")
    counter = AuditTenantCounter.__table__
    # Core statements, not the identity map: another process may have advanced the counter since this
    # session last read it.
    where = (counter.c.tenant == tenant) & (counter.c.kind == kind)
    last = session.scalar(select(counter.c.last).where(where))
    if last is None:
        session.execute(insert(counter).values(tenant=tenant, kind=kind, last=1))
        return 1
    session.execute(update(counter).where(where).values(last=last + 1))
    return int(last) + 1


def tenant_proof(link: Any) -> dict[str, Any]:
    """A link's proof as its tenant's auditors get it: its per-tenant number and its MAC, no chain position.

    `prev_mac` is left out too: comparing it with the tenant's previous link would tell whether another
    tenant's link came in between. The operator verifies a link from its MAC against the chain
    (`docqa audit verify`, or the global export of `docqa audit export`).
    """
    return {"seq": None if link.tenant_seq is None else int(link.tenant_seq), "mac": link.mac}
