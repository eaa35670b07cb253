"""SQL models of accounts. API keys are stored as SHA-256 digests only; the secret is shown once at creation.

A user is named by (tenant, user id): every tenant has its own user ids, so one tenant can neither see
nor take the ids of another. Keys and group memberships reference users by that pair.

Keys are 256-bit random secrets, so a fast digest is enough: no password stretching is needed to resist
guessing, and verification stays cheap on every request.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from docqa.db import Base

ROLES = ("user", "admin", "auditor")


def utcnow() -> datetime:
    return datetime.now(UTC)


group_members = Table(
    "account_group_members",
    Base.metadata,
    Column("group_id", ForeignKey("account_groups.id", ondelete="CASCADE"), primary_key=True),
    Column("tenant_id", String(64), primary_key=True),
    Column("user_id", String(64), primary_key=True),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["account_users.tenant_id", "account_users.id"], ondelete="CASCADE"),
)


class Tenant(Base):
    __tablename__ = "account_tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class User(Base):
    __tablename__ = "account_users"
    # Tenant first: the key serves every per-tenant listing too.
    __table_args__ = (PrimaryKeyConstraint("tenant_id", "id"),)

    id: Mapped[str] = mapped_column(String(64))
    tenant_id: Mapped[str] = mapped_column(ForeignKey("account_tenants.id"))
    role: Mapped[str] = mapped_column(String(16))
    display_name: Mapped[str] = mapped_column(String(200), default="")
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    groups: Mapped[list[Group]] = relationship(secondary=group_members, back_populates="members", lazy="selectin")


class Group(Base):
    __tablename__ = "account_groups"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("account_tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    members: Mapped[list[User]] = relationship(secondary=group_members, back_populates="groups")


class ApiKey(Base):
    __tablename__ = "account_api_keys"
    __table_args__ = (
        ForeignKeyConstraint(["tenant_id", "user_id"], ["account_users.tenant_id", "account_users.id"],
                             ondelete="CASCADE"),
        Index(None, "tenant_id", "user_id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200), default="")
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, default=None)

    user: Mapped[User] = relationship(lazy="joined")
