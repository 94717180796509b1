"""`OidcAuth`: bearer JWTs from an OpenID Connect provider, checked against its published keys (JWKS).

A token is accepted only when all of this holds, in this order (the first failure is a 401; the
cheap checks come first, so a forged or oversized token costs no network and no signature check):

1. it is at most `MAX_TOKEN_CHARS` long, and its header is a JSON object without ``crit``;
2. its ``alg`` is one of the configured algorithms: never ``none``, never ``HS*`` unless a shared
   secret is configured (so a token "signed" with the provider's public key as an HMAC secret is
   refused before any key is looked at);
3. its ``kid`` names a key of the provider's JWKS (no ``kid``: the JWKS has exactly one key), whose
   type and curve fit the ``alg`` (and whose own ``alg``, if any, is the same); keys named in the
   token itself (``jwk``, ``jku``, ``x5u``, ``x5c``) are never used;
4. the signature verifies, and ``iss``, ``aud``, ``exp`` (required), ``nbf`` and ``iat`` (when
   present) hold, with `leeway` seconds of clock skew;
5. the user-id claim is a string of 1-200 characters without control characters.

The JWKS is fetched with aiohttp (its URL from the issuer's discovery document unless given),
cached for `jwks_ttl` seconds and fetched again at once for an unknown ``kid`` (key rotation), but
never more than once per `refetch_interval` seconds, whatever the tokens say: a flood of made-up
key ids cannot hammer the provider. When a refresh fails, the keys already known stay in use.

PyJWT and cryptography (the ``server`` extra) are imported when an `OidcAuth` is built.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentrt import _json
from agentrt.errors import UserError
from agentrt.server._auth import ALL_SCOPES, DEFAULT_TOKEN_SCOPES, Principal, bearer_credentials, parse_scopes
from agentrt.server._errors import ApiError, redact_secrets
from agentrt.server._limits import id_problem

if TYPE_CHECKING:
    from jwt import PyJWK

__all__ = ["ASYMMETRIC_ALGORITHMS", "HMAC_ALGORITHMS", "MAX_TOKEN_CHARS", "OidcAuth"]

logger = logging.getLogger("agentrt.server.auth")

MAX_TOKEN_CHARS = 8192
"""Longer bearer tokens are refused before they are parsed."""
MAX_DOCUMENT_BYTES = 512 * 1024
"""Largest discovery document or JWKS read from the provider."""
MAX_KEYS = 100
"""Keys of a JWKS beyond this many are ignored."""

ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""The signature algorithms accepted by default (public keys from the JWKS)."""
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
"""Accepted only with `OidcAuth(shared_secret=...)`, and then checked with that secret only."""

_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
_REFUSED_HEADERS = ("crit",)
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}
_INVALID = {"WWW-Authenticate": 'Bearer realm="agentrt", error="invalid_token"'}


class _FetchError(Exception):
    """The provider's document could not be fetched or read (the message names why, never a token)."""


def _import_jwt() -> Any:
    missing = UserError("OIDC bearer tokens need PyJWT and cryptography: pip install 'agentrt[server]'")
    try:
        import jwt
        from jwt.algorithms import has_crypto
    except ImportError:
        raise missing from None
    if not has_crypto:
        raise missing
    return jwt


def _check_url(url: Any, what: str, *, allow_http: bool) -> str:
    if not isinstance(url, str) or not url:
        raise UserError(f"{what} must be a URL")
    parts = urlsplit(url)
    secure = parts.scheme == "https" or (parts.scheme == "http" and (allow_http or parts.hostname in _LOOPBACK))
    if secure and parts.hostname:
        return url
    raise UserError(f"{what} must be an https:// URL (http:// only for localhost, or with allow_http=True): {url!r}")


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """`claims[name]`; a dotted name not present as such is a path (``realm_access.roles``)."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _fits(alg: str, jwk: Mapping[str, Any]) -> bool:
    """Whether the key `jwk` may verify a signature made with `alg` (key type, curve, the key's own ``alg``)."""
    if "alg" in jwk and jwk["alg"] != alg:
        return False
    kty = jwk.get("kty")
    if alg[:2] in ("RS", "PS"):
        return kty == "RSA"
    if alg in _EC_CURVES:
        return kty == "EC" and jwk.get("crv") == _EC_CURVES[alg]
    if alg == "EdDSA":
        return kty == "OKP" and jwk.get("crv") in ("Ed25519", "Ed448")
    return False


def _usable(entry: Any) -> bool:
    """A JWKS entry that may verify signatures: a public-key type, meant for signing, with a string kid if any."""
    if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC", "OKP"):
        return False  # "oct" (a shared secret published as a key) is never a verification key here
    if "use" in entry and entry["use"] != "sig":
        return False
    ops = entry.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return False
    kid = entry.get("kid")
    return kid is None or isinstance(kid, str)


class OidcAuth:
    """Bearer JWTs of an OpenID Connect provider, validated against its JWKS (see the module docs).

    ``OidcAuth("https://idp.example.com/realms/acme", "agentrt")``: tokens must be issued by that
    issuer (exactly) for that audience; the caller's user id is the `user_claim` (``sub``).

    Scopes come from `scopes_claim` (``scope``, a space-separated string, and ``scp``; lists work
    too; a dotted name is a path, e.g. ``realm_access.roles``), after removing `scope_prefix` from
    each. A token that names none of agentrt's scopes (no claim, or only others such as ``openid
    profile``; with a `scope_prefix`, none under it) holds `default_scopes`: every scope but
    ``admin``. Pass ``default_scopes=()`` once the provider issues agentrt's scopes, so that a
    token without them (or with a misspelt one) gets nothing.
    """

    def __init__(
        self,
        issuer: str,
        audience: str | Sequence[str],
        *,
        jwks_url: str | None = None,
        user_claim: str = "sub",
        scopes_claim: str | Sequence[str] = ("scope", "scp"),
        scope_prefix: str = "",
        default_scopes: str | Sequence[str] | frozenset[str] = DEFAULT_TOKEN_SCOPES,
        algorithms: Sequence[str] | None = None,
        shared_secret: str | bytes | None = None,
        leeway: float = 60.0,
        jwks_ttl: float = 600.0,
        refetch_interval: float = 30.0,
        timeout: float = 10.0,
        allow_http: bool = False,
        trust_env: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Check the settings (`UserError`); nothing is fetched until the first token arrives.

        Args:
            issuer: The provider's issuer URL, exactly as its tokens' ``iss`` says.
            audience: The ``aud`` a token must name (one of them, for a list).
            jwks_url: The JWKS URL; default: ``jwks_uri`` of ``<issuer>/.well-known/openid-configuration``.
            user_claim: The claim holding the user id (``sub``; ``email``, ``oid``... a dotted path works).
            scopes_claim: The claim(s) holding scopes or roles.
            scope_prefix: Only scopes starting with it count, without it (``"agentrt:"``).
            default_scopes: Scopes of a token that names none of agentrt's.
            algorithms: Accepted ``alg`` values (default: `ASYMMETRIC_ALGORITHMS`, or `HMAC_ALGORITHMS`
                with a `shared_secret`); ``none`` never is.
            shared_secret: An HMAC secret (at least 32 bytes) for providers that sign with one.
            leeway: Seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
            jwks_ttl: Seconds the JWKS is used before it is fetched again.
            refetch_interval: Least number of seconds between two fetches (an unknown ``kid``, a failure).
            timeout: Seconds a fetch from the provider may take.
            allow_http: Accept ``http://`` URLs of other hosts than localhost (a private network only).
            trust_env: Reach the provider through the ``HTTPS_PROXY`` of the environment.
            clock: Monotonic seconds (tests).
        """
        self._jwt = _import_jwt()
        self.issuer = _check_url(issuer, "the OIDC issuer", allow_http=allow_http)
        audiences = (audience,) if isinstance(audience, str) else tuple(audience)
        if not audiences or not all(isinstance(a, str) and a for a in audiences):
            raise UserError("the OIDC audience must be a non-empty string (or a list of them)")
        self.audience: str | list[str] = audiences[0] if len(audiences) == 1 else list(audiences)
        if not isinstance(user_claim, str) or not user_claim:
            raise UserError("user_claim must name a claim")
        self.user_claim = user_claim
        claims = (scopes_claim,) if isinstance(scopes_claim, str) else tuple(scopes_claim)
        if not all(isinstance(c, str) and c for c in claims):
            raise UserError("scopes_claim must name claims")
        self.scopes_claims = claims
        if not isinstance(scope_prefix, str):
            raise UserError("scope_prefix must be a string")
        self.scope_prefix = scope_prefix
        self.default_scopes = parse_scopes(default_scopes, "default_scopes")
        secret = shared_secret.encode() if isinstance(shared_secret, str) else shared_secret
        if secret is not None and len(secret) < 32:
            raise UserError("an HMAC shared_secret must be at least 32 bytes long")
        self._secret = secret
        self.algorithms = self._check_algorithms(algorithms, secret is not None)
        for name, value in (("leeway", leeway), ("jwks_ttl", jwks_ttl), ("refetch_interval", refetch_interval)):
            if not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise UserError(f"{name} must be a non-negative number of seconds, not {value!r}")
        if not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise UserError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.leeway, self.jwks_ttl, self.refetch_interval, self.timeout = leeway, jwks_ttl, refetch_interval, timeout
        self.allow_http = allow_http
        self.trust_env = trust_env
        self.jwks_url = None if jwks_url is None else _check_url(jwks_url, "jwks_url", allow_http=allow_http)
        self._clock = clock
        self._keys: dict[str | None, list[dict[str, Any]]] | None = None
        self._key_count = 0
        self._prepared: dict[tuple[str | None, int, str], PyJWK] = {}
        self._fetched_at = -math.inf
        self._attempted_at = -math.inf
        self._lock = asyncio.Lock()
        self.fetches = 0
        """Fetches of the JWKS so far (discovery included), for metrics and tests."""

    @staticmethod
    def _check_algorithms(algorithms: Sequence[str] | None, has_secret: bool) -> tuple[str, ...]:
        if algorithms is None:
            return HMAC_ALGORITHMS if has_secret else ASYMMETRIC_ALGORITHMS
        chosen = (algorithms,) if isinstance(algorithms, str) else tuple(algorithms)
        if not chosen:
            raise UserError("algorithms must name at least one signature algorithm")
        for alg in chosen:
            if not isinstance(alg, str) or alg.lower() == "none":
                raise UserError("unsigned tokens (alg 'none') are never accepted")
            if alg in HMAC_ALGORITHMS and not has_secret:
                raise UserError(f"{alg} needs a shared_secret: without one, HMAC tokens are never accepted")
            if alg not in HMAC_ALGORITHMS and alg not in ASYMMETRIC_ALGORITHMS:
                known = ", ".join(ASYMMETRIC_ALGORITHMS + HMAC_ALGORITHMS)
                raise UserError(f"unsupported signature algorithm {alg!r}; known: {known}")
        return chosen

    @property
    def uses_jwks(self) -> bool:
        """Whether tokens are checked with the provider's public keys (not only a shared secret)."""
        return any(alg not in HMAC_ALGORITHMS for alg in self.algorithms)

    def __repr__(self) -> str:
        return f"OidcAuth(issuer={self.issuer!r}, audience={self.audience!r})"

    # -- tokens -------------------------------------------------------------------------------------------------
    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller of ``Authorization: Bearer <JWT>`` (`ApiError` 401; 503 while no key could ever be fetched)."""
        token = bearer_credentials(authorization, what="token", code="invalid_token")
        if len(token) > MAX_TOKEN_CHARS:
            raise _invalid("the token is longer than %d characters", MAX_TOKEN_CHARS)
        try:
            header = self._jwt.get_unverified_header(token)
        except Exception as exc:
            raise _invalid("the token's header cannot be read (%s)", type(exc).__name__) from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise _invalid("the token's algorithm is not accepted")
        if kid is not None and (not isinstance(kid, str) or not kid or len(kid) > 1024):
            raise _invalid("the token's key id is not a string")
        if any(name in header for name in _REFUSED_HEADERS):
            raise _invalid("the token has critical header extensions")
        key: Any = self._secret if alg in HMAC_ALGORITHMS else await self._key_for(kid, alg)
        try:
            claims = self._jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud"], "enforce_minimum_key_length": True},
            )
        except Exception as exc:
            raise _invalid("the token was refused (%s)", type(exc).__name__) from None
        return self._principal(claims)

    def _principal(self, claims: Any) -> Principal:
        if not isinstance(claims, dict):  # pragma: no cover - PyJWT only returns objects
            raise _invalid("the token's payload is not an object")
        user = _claim(claims, self.user_claim)
        if not isinstance(user, str) or id_problem("user id", user) is not None:
            raise _invalid("the token's user claim is missing or not a usable user id")
        return Principal(user, self._scopes(claims), "oidc:" + user)

    def _scopes(self, claims: Mapping[str, Any]) -> frozenset[str]:
        named: set[str] = set()
        prefix = self.scope_prefix
        scoped = False  # the token names a scope of agentrt's (with a prefix: any scope under it)
        for name in self.scopes_claims:
            value = _claim(claims, name)
            items = value.split() if isinstance(value, str) else value if isinstance(value, list) else []
            for item in items:
                if not isinstance(item, str) or not item.startswith(prefix):
                    continue
                scoped = scoped or bool(prefix)
                item = item[len(prefix) :]
                if item in ALL_SCOPES:
                    named.add(item)
        return frozenset(named) if named or scoped else self.default_scopes

    # -- keys ---------------------------------------------------------------------------------------------------
    async def _key_for(self, kid: str | None, alg: str) -> PyJWK:
        keys = await self._current_keys()
        entry = self._pick(keys, kid, alg)
        if entry is None and kid is not None and kid not in keys:
            keys = await self._refresh(unknown_kid=True)  # a new key (rotation); at most once per refetch_interval
            entry = self._pick(keys, kid, alg)
        if entry is None:
            raise _invalid("no key of the provider fits the token's key id and algorithm")
        index, jwk = entry
        cache_key = (kid, index, alg)
        prepared = self._prepared.get(cache_key)
        if prepared is None:
            try:
                prepared = self._jwt.PyJWK(jwk, algorithm=alg)
            except Exception as exc:
                raise _invalid("the provider's key cannot be used (%s)", type(exc).__name__) from None
            self._prepared[cache_key] = prepared
        return prepared

    def _pick(
        self, keys: Mapping[str | None, list[dict[str, Any]]], kid: str | None, alg: str
    ) -> tuple[int, dict[str, Any]] | None:
        if kid is None:
            if self._key_count != 1:
                return None  # several keys and no kid: which one signed is not ours to guess
            candidates = [jwk for entries in keys.values() for jwk in entries]
        else:
            candidates = keys.get(kid, [])
        for index, jwk in enumerate(candidates):
            if _fits(alg, jwk):
                return index, jwk
        return None

    async def _current_keys(self) -> Mapping[str | None, list[dict[str, Any]]]:
        if self._keys is not None and self._clock() - self._fetched_at < self.jwks_ttl:
            return self._keys
        return await self._refresh(unknown_kid=False)

    async def refresh(self) -> None:
        """Fetch the JWKS now (at startup, say), whatever the cache holds (`UserError` if it fails)."""
        async with self._lock:
            try:
                await self._fetch()
            except _FetchError as exc:
                raise UserError(f"cannot fetch the OIDC provider's keys: {redact_secrets(str(exc))}") from None

    async def _refresh(self, *, unknown_kid: bool) -> Mapping[str | None, list[dict[str, Any]]]:
        """Fetch the JWKS again unless a fetch was attempted within `refetch_interval` (one at a time)."""
        attempted = self._attempted_at
        async with self._lock:
            if self._attempted_at != attempted or self._clock() - self._attempted_at < self.refetch_interval:
                pass  # another request fetched meanwhile, or one did a moment ago: use what it got
            else:
                try:
                    await self._fetch()
                except _FetchError as exc:
                    logger.warning("could not fetch the OIDC provider's keys: %s", redact_secrets(str(exc)))
        if self._keys is None:
            retry = max(1, math.ceil(self.refetch_interval))
            raise ApiError(
                503,
                "the identity provider's keys cannot be fetched to check this token; retry later",
                code="auth_unavailable",
                headers={"Retry-After": str(retry)},
            )
        if unknown_kid:
            logger.debug("a token named a key id the provider does not publish (or not yet)")
        return self._keys

    async def _fetch(self) -> None:
        self._attempted_at = self._clock()
        self.fetches += 1
        url = self.jwks_url
        if url is None:
            discovery = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
            document = await self._get_json(discovery)
            if not isinstance(document, dict) or document.get("issuer") != self.issuer:
                raise _FetchError(f"the discovery document at {discovery} does not name the issuer {self.issuer!r}")
            try:
                url = _check_url(document.get("jwks_uri"), "the discovered jwks_uri", allow_http=self.allow_http)
            except UserError as exc:
                raise _FetchError(str(exc)) from None
            self.jwks_url = url
        document = await self._get_json(url)
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise _FetchError(f"{url} is not a JWKS (no 'keys' list)")
        keys: dict[str | None, list[dict[str, Any]]] = {}
        count = 0
        for entry in entries[:MAX_KEYS]:
            if _usable(entry):
                keys.setdefault(entry.get("kid"), []).append(entry)
                count += 1
        if not count:
            raise _FetchError(f"the JWKS at {url} holds no usable signature key")
        self._keys, self._key_count, self._prepared = keys, count, {}
        self._fetched_at = self._clock()

    async def _get_json(self, url: str) -> Any:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=self.trust_env) as session,
                session.get(url, allow_redirects=False, headers={"Accept": "application/json"}) as response,
            ):
                if response.status != 200:
                    raise _FetchError(f"{url} answered HTTP {response.status}")
                body = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise _FetchError(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _FetchError(f"{url}: {type(exc).__name__}: {exc}") from None
        try:
            return _json.loads(bytes(body))
        except ValueError:
            raise _FetchError(f"{url} did not send JSON") from None


def _invalid(reason: str, *args: Any) -> ApiError:
    """A 401 for a refused token: the reason goes to the debug log, never the token, nor to the client."""
    logger.debug("bearer token refused: " + reason, *args)
    return ApiError(401, "invalid or expired bearer token", code="invalid_token", headers=_INVALID)
