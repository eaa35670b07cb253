"""OIDC / JWT bearer tokens from a configured identity provider, as an alternative to API keys.

The token only says who is calling (its `sub`, or another configured claim, names a docqa user id). User ids
are per tenant, so the id is looked up in the token's tenant claim when one is configured, else in the server's
own tenant (`DOCQA_TENANT`): never in whichever tenant happens to have that id. Role and groups still come from
the docqa directory, so document access stays decided on the server, and a user an admin deactivated is refused
whatever their token says. Only asymmetric signatures are accepted (never `none` or HMAC, which a public key
could forge), and issuer, audience, expiry and subject are required.

Usage:
    verifier = TokenVerifier(issuer="https://idp.example.com/", audience="docqa",
                             jwks_url="https://idp.example.com/.well-known/jwks.json")
    identity = verifier.user_of(token)     # (user id, tenant), or None for an invalid, expired or foreign token
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jwt
from sqlalchemy.orm import Session

from docqa.accounts.directory import get_user
from docqa.accounts.identity import Caller
from docqa.errors import ConfigurationError

logger = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


def looks_like_jwt(credential: str) -> bool:
    """A compact JWS: three base64url segments. API keys never contain dots."""
    return credential.count(".") == 2 and all(credential.split("."))


class TokenVerifier:
    """Verifies signed JWTs against the provider's key set (a JWKS URL, cached, or a JWKS file)."""

    def __init__(self, issuer: str, audience: str, *, jwks_url: str | None = None, jwks_file: Path | None = None,
                 user_claim: str = "sub", tenant_claim: str | None = None, default_tenant: str = "default",
                 leeway_s: float = 30.0) -> None:
        if (jwks_url is None) == (jwks_file is None):
            raise ValueError("give exactly one of jwks_url and jwks_file")
        self.issuer = issuer
        self.audience = audience
        self.user_claim = user_claim
        self.tenant_claim = tenant_claim
        self.default_tenant = default_tenant
        self.leeway_s = leeway_s
        self._client = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=5) if jwks_url else None
        self._file_keys = _read_key_set(jwks_file) if jwks_file else []

    def claims_of(self, token: str) -> dict[str, Any] | None:
        """The verified claims, or None (logged without the token) when the token must be refused."""
        try:
            key = self._signing_key(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", "iss", "aud", self.user_claim]},
            )
        except (jwt.PyJWTError, ValueError) as exc:
            logger.info("bearer token refused: %s", type(exc).__name__)
            return None
        if not isinstance(claims.get(self.user_claim), str) or not claims[self.user_claim]:
            logger.info("bearer token refused: claim %r is not a user id", self.user_claim)
            return None
        return claims

    def user_of(self, token: str) -> tuple[str, str] | None:
        """(docqa user id, its tenant: the tenant claim, or `default_tenant` without one) of a valid token."""
        claims = self.claims_of(token)
        if claims is None:
            return None
        tenant = self.default_tenant
        if self.tenant_claim is not None:
            tenant = claims.get(self.tenant_claim)
            if not isinstance(tenant, str) or not tenant:
                logger.info("bearer token refused: no %r claim", self.tenant_claim)
                return None
        return claims[self.user_claim], tenant

    def _signing_key(self, token: str) -> Any:
        header = jwt.get_unverified_header(token)
        if header.get("alg") not in ALGORITHMS:
            raise jwt.InvalidAlgorithmError(f"algorithm {header.get('alg')!r} is not accepted")
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token).key
        kid = header.get("kid")
        candidates = [k for k in self._file_keys if kid is None or k.key_id == kid]
        if len(candidates) != 1:
            raise jwt.InvalidKeyError("no single key in the key set matches the token's kid")
        return candidates[0].key


def _read_key_set(path: Path) -> list[jwt.PyJWK]:
    try:
        return list(jwt.PyJWKSet.from_json(path.read_text(encoding="utf-8")).keys)
    except (OSError, jwt.PyJWTError) as exc:
        raise ConfigurationError(f"cannot read the OIDC key set {path}: {exc}") from exc


def build_token_verifier(settings: Any) -> TokenVerifier | None:
    """The verifier the server settings describe, or None when bearer tokens are not configured."""
    if not settings.oidc_issuer:
        return None
    if not settings.oidc_audience:
        raise ConfigurationError("DOCQA_OIDC_AUDIENCE is required with DOCQA_OIDC_ISSUER")
    if bool(settings.oidc_jwks_url) == bool(settings.oidc_jwks_file):
        raise ConfigurationError("set one of DOCQA_OIDC_JWKS_URL and DOCQA_OIDC_JWKS_FILE with DOCQA_OIDC_ISSUER")
    return TokenVerifier(
        settings.oidc_issuer,
        settings.oidc_audience,
        jwks_url=settings.oidc_jwks_url,
        jwks_file=Path(settings.oidc_jwks_file) if settings.oidc_jwks_file else None,
        user_claim=settings.oidc_user_claim,
        tenant_claim=settings.oidc_tenant_claim,
        default_tenant=settings.tenant,
        leeway_s=settings.oidc_leeway_s,
    )


def token_caller(session: Session, user_id: str, tenant: str) -> Caller | None:
    """The caller a verified token names: the active docqa user `user_id` of `tenant`.

    Verify first (`TokenVerifier.user_of`, which may fetch the key set), then open the session for this lookup.
    """
    user = get_user(session, tenant, user_id)
    if user is None or not user.active:
        logger.info("bearer token refused: no active docqa user for it")
        return None
    # The rate-limit bucket: per user of a tenant, so a same-named user elsewhere never shares it.
    return Caller.of_user(user, f"oidc:{user.tenant_id}:{user.id}")
