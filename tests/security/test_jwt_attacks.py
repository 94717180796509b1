"""Attacks on OIDC bearer-token authentication (`OidcAuth`), against a local identity provider.

The provider is a real HTTP server on 127.0.0.1 publishing a discovery document and a JWKS (each
request counted); the tests mint tokens with keys they generate. Every refused token must be a 401
that names nothing of the token (body, headers, logs), must cost nothing (no session written, the
model never called), and must not make the server fetch keys more than the rate allows.

Checked: expiry and not-before beyond the leeway, wrong issuer and audience, signatures by another
key under the same ``kid``, ``alg: none``, HS256 "signed" with the public key (algorithm
confusion), a token's algorithm that does not fit its key, keys the token brings along (``jwk``,
``jku``), unknown key ids (one refetch, rate-limited), rotation, oversized tokens, bad user ids,
and, as a hypothesis property, arbitrary mutations of a valid token.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from agentrt import ReActAgent
from agentrt.model import ScriptedModel
from agentrt.server import ApiError, OidcAuth, create_app
from agentrt.server._oidc import MAX_TOKEN_CHARS
from agentrt.state import InMemoryStateStore

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
P384_KEY = ec.generate_private_key(ec.SECP384R1())
AUD = "agentrt"
MESSAGES = "/v1/agents/bot/sessions/s1/messages"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Any) -> str:
    return b64(json.dumps(value, separators=(",", ":")).encode())


def unb64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment.rstrip("=") + "=" * (-len(segment.rstrip("=")) % 4))


def public_jwk(key: Any, **extra: Any) -> dict[str, Any]:
    public = key.public_key()
    text = RSAAlgorithm.to_jwk(public) if isinstance(public, rsa.RSAPublicKey) else ECAlgorithm.to_jwk(public)
    jwk: dict[str, Any] = json.loads(text)
    return {**jwk, **extra}


class Idp:
    """An OpenID provider on 127.0.0.1 (discovery + JWKS, every request counted) minting tokens."""

    def __init__(self) -> None:
        # rsa-1 pins its algorithm (RS256), as many providers publish it; ec-1 does not.
        self.published: list[dict[str, Any]] = [
            public_jwk(RSA_KEY, kid="rsa-1", use="sig", alg="RS256"),
            public_jwk(EC_KEY, kid="ec-1", use="sig"),
        ]
        self.hits: Counter[str] = Counter()
        self.issuer = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Idp:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_get("/attacker-jwks", self._attacker)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.issuer = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response({"issuer": self.issuer, "jwks_uri": self.issuer + "/jwks"})

    async def _jwks(self, request: web.Request) -> web.Response:
        self.hits["jwks"] += 1
        return web.json_response({"keys": self.published})

    async def _attacker(self, request: web.Request) -> web.Response:
        self.hits["attacker"] += 1
        return web.json_response({"keys": [public_jwk(OTHER_RSA_KEY, kid="rsa-1")]})

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        payload: dict[str, Any] = {"iss": self.issuer, "aud": AUD, "sub": "alice", "iat": now, "exp": now + 300}
        payload.update(overrides)
        return {k: v for k, v in payload.items() if v is not DROP}

    def token(self, kid: str | None = "rsa-1", *, key: Any = None, alg: str | None = None, **claims: Any) -> str:
        signer: Any = key if key is not None else EC_KEY if kid == "ec-1" else RSA_KEY
        alg = alg or ("RS256" if isinstance(signer, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(self.claims(**claims), signer, algorithm=alg, headers={"kid": kid} if kid else None)

    def unsigned(self, header: dict[str, Any], signature: bytes = b"", **claims: Any) -> str:
        return f"{b64json(header)}.{b64json(self.claims(**claims))}.{b64(signature)}"


DROP: Any = object()
"""A claim value meaning: leave the claim out."""


def hs256_with(secret: bytes, idp: Idp, kid: str = "rsa-1") -> str:
    """An HS256 token whose HMAC key is `secret` (the algorithm-confusion attack when it is public)."""
    signing_input = f"{b64json({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{b64json(idp.claims())}"
    return signing_input + "." + b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def idp() -> AsyncIterator[Idp]:
    async with Idp() as provider:
        yield provider


class Served:
    """An app authenticating with `idp`'s tokens, its store, its model and a client."""

    def __init__(self, idp: Idp, **options: Any) -> None:
        self.now = [0.0]
        self.model = ScriptedModel(["hello"] * 20)
        self.store = InMemoryStateStore()
        options.setdefault("clock", lambda: self.now[0])
        self.auth = OidcAuth(idp.issuer, AUD, **options)
        agent = ReActAgent("bot", "You answer.", model=self.model)
        app = create_app({"bot": agent}, store=self.store, auth=self.auth)
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")

    async def post(self, token: str) -> httpx.Response:
        return await self.client.post(MESSAGES, json={"input": "hi"}, headers=bearer(token))

    async def untouched(self) -> bool:
        """Nothing happened: no session of anyone, and the model was never called."""
        sessions = [await self.store.list_sessions(user, agent="bot") for user in ("alice", "bob", "")]
        return self.model.requests == [] and sessions == [[], [], []]


@pytest.fixture
async def served(idp: Idp) -> AsyncIterator[Served]:
    s = Served(idp)
    async with s.client:
        yield s


def assert_refused(r: httpx.Response, token: str, logs: str) -> None:
    """A 401 naming nothing of the token, anywhere."""
    assert r.status_code == 401, r.text
    assert r.json()["error"]["type"] == "authentication_error"
    assert r.headers["www-authenticate"].startswith('Bearer realm="agentrt"')
    pieces = [token, *(part for part in token.split(".") if len(part) >= 8)]
    for piece in pieces:
        assert piece not in r.text
        assert piece not in str(r.headers)
        assert piece not in logs


# -- tokens refused ---------------------------------------------------------------------------------------------------
def _refused_cases() -> dict[str, Callable[[Idp], str]]:
    def now() -> int:  # when the case runs, not when the module was collected
        return int(time.time())

    public_pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_der = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return {
        "expired beyond the leeway": lambda idp: idp.token(exp=now() - 61 - 5, iat=now() - 600),
        "not yet valid (nbf)": lambda idp: idp.token(nbf=now() + 120),
        "issued in the future (iat)": lambda idp: idp.token(iat=now() + 120),
        "wrong issuer": lambda idp: idp.token(iss="https://evil.example"),
        "issuer with a trailing slash": lambda idp: idp.token(iss=idp.issuer + "/"),
        "issuer as a prefix": lambda idp: idp.token(iss=idp.issuer[:-1]),
        "wrong audience": lambda idp: idp.token(aud="another-api"),
        "audiences without ours": lambda idp: idp.token(aud=["another-api", "agentrt-admin"]),
        "no audience": lambda idp: idp.token(aud=DROP),
        "no expiry": lambda idp: idp.token(exp=DROP),
        "non-numeric expiry": lambda idp: idp.token(exp="tomorrow"),
        "signed by another key under the same kid": lambda idp: idp.token("rsa-1", key=OTHER_RSA_KEY),
        "EC-signed by another key under the same kid": lambda idp: idp.token(
            "ec-1", key=ec.generate_private_key(ec.SECP256R1())
        ),
        "payload swapped under a valid signature": lambda idp: ".".join(
            [idp.token().split(".")[0], b64json(idp.claims(sub="bob")), idp.token().split(".")[2]]
        ),
        "alg none": lambda idp: idp.unsigned({"alg": "none", "typ": "JWT", "kid": "rsa-1"}),
        "alg None": lambda idp: idp.unsigned({"alg": "None", "kid": "rsa-1"}),
        "alg NONE with a signature": lambda idp: idp.unsigned({"alg": "NONE"}, b"x" * 32),
        "no alg": lambda idp: idp.unsigned({"kid": "rsa-1"}, b"x" * 256),
        "HS256 keyed with the public key (PEM)": lambda idp: hs256_with(public_pem, idp),
        "HS256 keyed with the public key (DER)": lambda idp: hs256_with(public_der, idp),
        "HS256 keyed with the public JWK": lambda idp: hs256_with(json.dumps(idp.published[0]).encode(), idp),
        "RS256 under the EC key's kid": lambda idp: idp.token("ec-1", key=RSA_KEY),
        "ES256 under the RSA key's kid": lambda idp: idp.token("rsa-1", key=EC_KEY),
        "PS256 against a key pinned to RS256": lambda idp: idp.token("rsa-1", key=RSA_KEY, alg="PS256"),
        "ES384 against a P-256 key": lambda idp: idp.token("ec-1", key=P384_KEY, alg="ES384"),
        "no kid while the JWKS has two keys": lambda idp: idp.token(None),
        "kid of a path": lambda idp: idp.token("../../../../etc/passwd", key=RSA_KEY),
        "kid not a string": lambda idp: idp.unsigned({"alg": "RS256", "kid": 1}, b"x" * 256),
        "critical header extension": lambda idp: jwt.encode(
            idp.claims(), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1", "crit": ["exp"]}
        ),
        "no user id": lambda idp: idp.token(sub=DROP),
        "a numeric user id": lambda idp: idp.token(sub=12345),
        "a list as user id": lambda idp: idp.token(sub=["alice"]),
        "an empty user id": lambda idp: idp.token(sub=""),
        "a user id of 201 characters": lambda idp: idp.token(sub="a" * 201),
        "a user id with a newline": lambda idp: idp.token(sub="alice\nadmin"),
        "a user id with a NUL": lambda idp: idp.token(sub="alice\x00"),
        "not a JWT": lambda idp: "sk-not-a-jwt",
        "two segments": lambda idp: ".".join(idp.token().split(".")[:2]),
        "four segments": lambda idp: idp.token() + ".AAAA",
        "a JSON array header": lambda idp: f"{b64json([1])}.{b64json(idp.claims())}.AAAA",
        "a deeply nested header": lambda idp: f"{b64(b'[' * 5000)}.{b64json(idp.claims())}.AAAA",
    }


REFUSED = _refused_cases()


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_refused_token_is_401_and_leaves_no_trace(
    idp: Idp, served: Served, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert (await served.post(idp.token(sub="warmup"))).status_code == 200  # the JWKS is cached
    served.model.requests.clear()
    await served.store.delete("warmup", "s1", agent="bot")
    token = REFUSED[case](idp)
    r = await served.post(token)
    assert_refused(r, token, caplog.text)
    assert await served.untouched()
    assert idp.hits["jwks"] == 1  # the clock stands still: no refetch however the kid looks
    assert idp.hits["attacker"] == 0


async def test_expiry_within_the_leeway_is_accepted(idp: Idp) -> None:
    now = int(time.time())
    late = idp.token(exp=now - 30, iat=now - 330)
    lenient, strict = Served(idp), Served(idp, leeway=0)
    async with lenient.client, strict.client:
        assert (await lenient.post(late)).status_code == 200
        assert (await strict.post(late)).status_code == 401
        assert (await lenient.post(idp.token(nbf=now + 30))).status_code == 200


async def test_keys_a_token_brings_along_are_never_used(idp: Idp, served: Served) -> None:
    attacker = public_jwk(OTHER_RSA_KEY, kid="rsa-1")
    for header in (
        {"kid": "rsa-1", "jwk": attacker},  # embedded key (CVE-2018-0114)
        {"kid": "rsa-1", "jku": idp.issuer + "/attacker-jwks"},  # a JWKS URL of the attacker's
        {"kid": "rsa-1", "x5u": idp.issuer + "/attacker-jwks"},
        {"jwk": attacker},  # no kid: the embedded key would be the only candidate
    ):
        token = jwt.encode(idp.claims(), OTHER_RSA_KEY, algorithm="RS256", headers=header)
        assert (await served.post(token)).status_code == 401
    assert idp.hits["attacker"] == 0
    assert await served.untouched()


async def test_a_jwks_publishes_no_secret_nor_weak_key_that_counts(idp: Idp, served: Served) -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    secret = b"k" * 32
    idp.published += [
        {"kty": "oct", "kid": "hmac", "k": b64(secret)},  # a shared secret in a public JWKS
        public_jwk(weak, kid="weak", use="sig"),
        public_jwk(OTHER_RSA_KEY, kid="enc", use="enc"),  # an encryption key
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyJWT warns of the 1024-bit key it signs with
        weak_token = idp.token("weak", key=weak)
    tokens = [
        jwt.encode(idp.claims(), secret, algorithm="HS256", headers={"kid": "hmac"}),
        weak_token,
        idp.token("enc", key=OTHER_RSA_KEY),
    ]
    for token in tokens:
        assert (await served.post(token)).status_code == 401
    assert await served.untouched()


async def test_an_oversized_token_is_refused_before_it_is_parsed(idp: Idp, served: Served) -> None:
    token = idp.token(padding="x" * MAX_TOKEN_CHARS)  # validly signed, but too long
    assert len(token) > MAX_TOKEN_CHARS
    r = await served.post(token)
    assert r.status_code == 401
    assert idp.hits == {}  # not even the keys were fetched
    assert await served.untouched()


# -- key ids, refetches and rotation ----------------------------------------------------------------------------------
async def test_an_unknown_kid_refetches_once_per_interval(idp: Idp, served: Served) -> None:
    assert (await served.post(idp.token())).status_code == 200
    assert idp.hits == {"discovery": 1, "jwks": 1}
    served.now[0] = 31.0
    assert (await served.post(idp.token("ghost-1", key=OTHER_RSA_KEY))).status_code == 401
    assert idp.hits["jwks"] == 2  # one refetch: the key might be new
    served.now[0] = 40.0
    assert (await served.post(idp.token("ghost-2", key=OTHER_RSA_KEY))).status_code == 401
    # A flood of made-up key ids, at once: still no refetch within the interval.
    flood = [served.auth.authenticate("Bearer " + idp.token(f"ghost-{i}", key=OTHER_RSA_KEY)) for i in range(50)]
    results = await asyncio.gather(*flood, return_exceptions=True)
    assert all(isinstance(e, ApiError) and e.status == 401 for e in results)
    assert idp.hits["jwks"] == 2
    served.now[0] = 62.0
    assert (await served.post(idp.token("ghost-3", key=OTHER_RSA_KEY))).status_code == 401
    assert idp.hits == {"discovery": 1, "jwks": 3}


async def test_a_flood_on_a_cold_cache_fetches_once(idp: Idp, served: Served) -> None:
    tokens = [idp.token(f"ghost-{i}", key=OTHER_RSA_KEY) for i in range(30)] + [idp.token()]
    results = await asyncio.gather(*(served.auth.authenticate("Bearer " + t) for t in tokens), return_exceptions=True)
    assert [r.user_id for r in results if not isinstance(r, BaseException)] == ["alice"]
    assert idp.hits == {"discovery": 1, "jwks": 1}


async def test_key_rotation(idp: Idp, served: Served) -> None:
    old = idp.token()
    assert (await served.post(old)).status_code == 200
    # The provider rotates: rsa-2 replaces rsa-1.
    idp.published = [public_jwk(OTHER_RSA_KEY, kid="rsa-2", use="sig"), idp.published[1]]
    served.now[0] = 31.0
    new = idp.token("rsa-2", key=OTHER_RSA_KEY, sub="bob")
    assert (await served.post(new)).status_code == 200  # accepted after one refetch
    assert idp.hits["jwks"] == 2
    assert (await served.post(new)).status_code == 200
    assert (await served.post(old)).status_code == 401  # the retired key no longer counts
    assert idp.hits["jwks"] == 2


async def test_no_kid_is_fine_when_the_jwks_has_one_key(idp: Idp, served: Served) -> None:
    idp.published = idp.published[:1]
    assert (await served.post(idp.token(None))).status_code == 200


# -- scopes -----------------------------------------------------------------------------------------------------------
async def test_a_token_without_the_scope_writes_nothing(idp: Idp, served: Served) -> None:
    for scope in ("sessions:read", "tools:approve knowledge:write", ["sessions:read", "admin:"]):
        r = await served.post(idp.token(scope=scope))
        assert r.status_code == 403, scope
        assert r.json()["error"]["code"] == "insufficient_scope"
    assert await served.untouched()


async def test_strict_scopes_refuse_tokens_naming_none_or_misspelt_ones(idp: Idp) -> None:
    # By default a token naming no agentrt scope holds the default scopes (every one but admin).
    # Strict: default_scopes=(); or a prefix, under which any scope named makes the token scoped.
    strict, prefixed = Served(idp, default_scopes=()), Served(idp, scope_prefix="agentrt:")
    async with strict.client, prefixed.client:
        for scope in (DROP, "openid profile", "messages:read", "Messages:Write", "messages:write:"):
            r = await strict.post(idp.token(scope=scope))
            assert r.status_code == 403, scope
        for scope in ("agentrt:messages:read", "agentrt:Messages:Write messages:write", "agentrt:"):
            r = await prefixed.post(idp.token(scope=scope))
            assert r.status_code == 403, scope
        assert await strict.untouched()
        assert await prefixed.untouched()
        assert (await prefixed.post(idp.token(scope="openid profile"))).status_code == 200
        assert (await prefixed.post(idp.token(scope="agentrt:messages:write"))).status_code == 200


# -- arbitrary mutations (hypothesis) ---------------------------------------------------------------------------------
class Harness:
    """One provider and one `OidcAuth` for every example, on an event loop of their own."""

    def __init__(self, runner: asyncio.Runner) -> None:
        self.runner = runner
        self.idp = runner.run(Idp().__aenter__())
        self.auth = OidcAuth(self.idp.issuer, AUD, clock=lambda: 0.0)  # the clock stands still: no refetch
        self.rsa_token = self.idp.token()
        self.ec_token = self.idp.token("ec-1", sub="bob")
        assert runner.run(self.auth.authenticate("Bearer " + self.rsa_token)).user_id == "alice"
        assert runner.run(self.auth.authenticate("Bearer " + self.ec_token)).user_id == "bob"

    def authenticate(self, token: str) -> Any:
        return self.runner.run(self.auth.authenticate("Bearer " + token))


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with asyncio.Runner() as runner:
        h = Harness(runner)
        try:
            yield h
        finally:
            runner.run(h.idp.__aexit__())


def same_token(a: str, b: str) -> bool:
    """Whether `b` is `a` as a verifier sees it: the signed text, and the signature's bytes."""
    pa, pb = a.split("."), b.split(".")
    if len(pb) != 3 or pa[:2] != pb[:2]:
        return False
    try:
        return unb64(pa[2]) == unb64(pb[2])
    except ValueError:
        return False


B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@st.composite
def mutated(draw: st.DrawFn, token: str) -> str:
    """`token` with a change: characters replaced, inserted or removed, a segment's bytes flipped, cut, swapped."""
    kind = draw(st.sampled_from(["replace", "insert", "delete", "flip", "cut", "segments"]))
    chars = st.one_of(st.sampled_from(B64URL + ".=+/ "), st.characters(codec="latin-1"), st.characters())
    if kind in ("replace", "insert", "delete"):
        i = draw(st.integers(0, len(token) - 1))
        c = draw(chars)
        return token[:i] + ("" if kind == "delete" else c) + token[i + (kind != "insert") :]
    parts = token.split(".")
    if kind == "flip":
        n = draw(st.integers(0, 2))
        data = bytearray(unb64(parts[n]))
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= draw(st.integers(1, 255))
        parts[n] = b64(bytes(data))
        return ".".join(parts)
    if kind == "cut":
        return token[: draw(st.integers(0, len(token) - 1))]
    order = draw(st.permutations([0, 1, 2]))
    repeat = draw(st.lists(st.integers(0, 2), max_size=2))
    return ".".join(parts[i] for i in [*order, *repeat])


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@example(data=None)
def test_a_mutated_token_never_authenticates_and_never_fails_otherwise(harness: Harness, data: Any) -> None:
    original = harness.rsa_token if data is None or data.draw(st.booleans()) else harness.ec_token
    token = original + "==" if data is None else data.draw(mutated(original))
    try:
        principal = harness.authenticate(token)
    except ApiError as exc:
        assert exc.status == 401, (exc.status, exc.message)
        assert exc.code == "invalid_token"
        # One of two fixed messages: nothing of the token is ever echoed.
        assert exc.message in (
            "invalid or expired bearer token",
            "malformed Authorization header: expected 'Bearer <token>'",
        )
    else:
        # Only the same token can pass: PyJWT accepts '=' padding after the signature (the same bytes),
        # and the header's whitespace around the credentials is not part of them (RFC 6750: 1*SP).
        assert same_token(original, token.strip()), token
        assert principal.user_id == ("alice" if original == harness.rsa_token else "bob")
    assert harness.auth.fetches == 1  # no token, however mangled, made the server fetch keys


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_token_over_http_is_a_401(harness: Harness, data: Any) -> None:
    printable = "".join(chr(c) for c in range(0x21, 0x7F))
    token = harness.rsa_token
    i = data.draw(st.integers(0, len(token) - 1))
    token = token[:i] + data.draw(st.sampled_from(printable)) + token[i + 1 :]
    if same_token(harness.rsa_token, token):
        return
    agent = ReActAgent("bot", "You answer.", model=ScriptedModel(["hello"]))
    app = create_app({"bot": agent}, store=InMemoryStateStore(), auth=harness.auth, facades=())

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as client:
            return await client.post(MESSAGES, json={"input": "hi"}, headers=bearer(token))

    r = harness.runner.run(call())
    assert r.status_code == 401, r.text
    assert token not in r.text
