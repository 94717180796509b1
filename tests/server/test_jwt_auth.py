"""OIDC bearer tokens: a local identity provider (discovery + JWKS over real HTTP) and tokens the tests mint.

Scopes per route, users from a configured claim, API keys beside tokens, the JWKS cache, and the
`agentrt serve` options and config keys. The attacks (forged, expired, confused tokens) are in
tests/security/test_jwt_attacks.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from server_agents import free_port, make_agent

from agentrt.errors import UserError
from agentrt.model import ScriptedModel
from agentrt.server import ApiError, ApiKeyAuth, CombinedAuth, OidcAuth, Principal, RateLimit, Scope, create_app
from agentrt.server._serve import load_config
from agentrt.state import InMemoryStateStore

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
NEW_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
AUD = "agentrt"
S = "/v1/agents/bot/sessions"


def public_jwk(kid: str, key: Any) -> dict[str, Any]:
    public = key.public_key()
    jwk: dict[str, Any] = json.loads(
        RSAAlgorithm.to_jwk(public) if isinstance(public, rsa.RSAPublicKey) else ECAlgorithm.to_jwk(public)
    )
    return {**jwk, "kid": kid, "use": "sig"}


class Idp:
    """An OpenID provider on 127.0.0.1: its discovery document and JWKS, each request counted."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {"rsa-1": RSA_KEY, "ec-1": EC_KEY}
        self.hits: Counter[str] = Counter()
        self.issuer = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Idp:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
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
        return web.json_response({"keys": [public_jwk(kid, key) for kid, key in self.keys.items()]})

    def token(self, kid: str | None = "rsa-1", *, key: Any = None, drop: tuple[str, ...] = (), **claims: Any) -> str:
        """A token of this provider for `AUD`, user alice, valid for 5 minutes (`claims` override)."""
        now = int(time.time())
        payload: dict[str, Any] = {"iss": self.issuer, "aud": AUD, "sub": "alice", "iat": now, "exp": now + 300}
        payload.update(claims)
        for name in drop:
            payload.pop(name, None)
        signer = key if key is not None else self.keys[kid or "rsa-1"]
        alg = "RS256" if isinstance(signer, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(payload, signer, algorithm=alg, headers={"kid": kid} if kid else None)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def idp() -> AsyncIterator[Idp]:
    async with Idp() as provider:
        yield provider


@pytest.fixture
def store() -> InMemoryStateStore:
    return InMemoryStateStore()


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(["hello"] * 20)


@pytest.fixture
def serve(idp: Idp, store: InMemoryStateStore, model: ScriptedModel) -> Callable[..., httpx.AsyncClient]:
    """``serve(**create_app options)``: a client of an app authenticating with `idp`'s tokens."""

    def build(**options: Any) -> httpx.AsyncClient:
        from agentrt import ReActAgent

        agents = {"bot": ReActAgent("bot", "You answer.", model=model), "tools": make_agent("tools")}
        options.setdefault("auth", OidcAuth(idp.issuer, AUD))
        app = create_app(agents, store=store, disconnect_grace=0.0, **options)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")

    return build


# -- users ------------------------------------------------------------------------------------------------------------
async def test_a_token_runs_as_its_user_and_sees_only_its_sessions(
    idp: Idp, serve: Callable[..., httpx.AsyncClient], store: InMemoryStateStore
) -> None:
    alice, bob = bearer(idp.token(sub="alice")), bearer(idp.token("ec-1", sub="bob"))
    async with serve() as client:
        r = await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=alice)
        assert r.status_code == 200, r.text
        assert r.json()["message"]["content"][0]["text"] == "hello"
        assert (await client.get(f"{S}/s1", headers=alice)).json()["message_count"] == 2
        # Bob (an EC-signed token) does not have Alice's session: 404, and his list is empty.
        r = await client.get(f"{S}/s1", headers=bob)
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "session_not_found"
        assert (await client.get(S, headers=bob)).json() == {"sessions": []}
        assert [s["session_id"] for s in (await client.get(S, headers=alice)).json()["sessions"]] == ["s1"]
    assert await store.load("alice", "s1", agent="bot") is not None
    assert await store.load("bob", "s1", agent="bot") is None
    # Discovery once, the JWKS once: later tokens are checked against the cache.
    assert idp.hits == {"discovery": 1, "jwks": 1}


async def test_the_user_id_comes_from_the_configured_claim(
    idp: Idp, serve: Callable[..., httpx.AsyncClient], store: InMemoryStateStore
) -> None:
    auth = OidcAuth(idp.issuer, AUD, user_claim="email", jwks_url=idp.issuer + "/jwks")
    async with serve(auth=auth) as client:
        r = await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=bearer(idp.token(email="a@x.org")))
        assert r.status_code == 200, r.text
        r = await client.get(S, headers=bearer(idp.token(drop=("email",))))  # no such claim: no user
        assert r.status_code == 401
    assert await store.load("a@x.org", "s1", agent="bot") is not None
    assert idp.hits == {"jwks": 1}  # jwks_url given: no discovery


# -- scopes -----------------------------------------------------------------------------------------------------------
async def test_a_token_without_the_routes_scope_is_403_and_changes_nothing(
    idp: Idp, serve: Callable[..., httpx.AsyncClient], store: InMemoryStateStore, model: ScriptedModel
) -> None:
    reader = bearer(idp.token(scope="openid sessions:read"))
    async with serve() as client:
        assert (await client.get(S, headers=reader)).status_code == 200
        assert (await client.get("/v1/agents", headers=reader)).status_code == 200
        for method, path, body in [
            ("POST", f"{S}/s1/messages", {"input": "hi"}),
            ("POST", f"{S}/s1/interrupt", {}),
            ("DELETE", f"{S}/s1", None),
            ("POST", "/v1/chat/completions", {"model": "bot", "messages": [{"role": "user", "content": "hi"}]}),
        ]:
            r = await client.request(method, path, json=body, headers=reader)
            assert r.status_code == 403, (path, r.text)
            assert r.json()["error"]["code"] == "insufficient_scope"
            assert r.headers["www-authenticate"] == (
                'Bearer realm="agentrt", error="insufficient_scope", scope="messages:write"'
            )
    assert model.requests == []  # the model was never called
    assert await store.load("alice", "s1", agent="bot") is None  # nor was a session written


async def test_approving_tool_calls_needs_its_own_scope(
    idp: Idp, serve: Callable[..., httpx.AsyncClient], store: InMemoryStateStore
) -> None:
    writer = bearer(idp.token(scope="messages:write sessions:read"))
    approver = bearer(idp.token(scp=["tools:approve"]))  # Entra/Okta's `scp`, as a list
    path = "/v1/agents/tools/sessions/s1"
    async with serve() as client:
        r = await client.post(f"{path}/messages", json={"input": "danger x"}, headers=writer)
        assert r.json()["message"]["metadata"]["generate_reason"] == "awaiting_confirmation"
        before = await store.load("alice", "s1", agent="tools")
        assert before is not None
        confirm = {"results": [{"tool_call_id": "call-danger", "confirmed": True}]}
        r = await client.post(f"{path}/confirm", json=confirm, headers=writer)
        assert r.status_code == 403
        after = await store.load("alice", "s1", agent="tools")
        assert after is not None
        assert after.revision == before.revision  # still pending: the tool did not run
        r = await client.post(f"{path}/confirm", json=confirm, headers=approver)
        assert r.status_code == 200, r.text
        assert "danger=did x" in r.json()["message"]["content"][0]["text"]


async def test_tokens_naming_no_agentrt_scope_get_the_default_scopes(
    idp: Idp, serve: Callable[..., httpx.AsyncClient]
) -> None:
    plain = bearer(idp.token(scope="openid profile email"))
    admin = bearer(idp.token(scope="openid admin"))
    async with serve() as client:
        assert (await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=plain)).status_code == 200
        # /readyz lists the store's problems to admins only (every scope but admin is the default).
        assert "problems" not in (await client.get("/readyz", headers=plain)).json()
        assert (await client.get("/readyz", headers=admin)).json() == {"status": "ready", "problems": []}
        assert (await client.delete(f"{S}/s1", headers=admin)).status_code == 204  # admin holds every scope
    strict = OidcAuth(idp.issuer, AUD, default_scopes=())
    async with serve(auth=strict) as client:
        r = await client.get(S, headers=plain)
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "insufficient_scope"


async def test_the_protocol_facades_need_messages_write(
    idp: Idp, serve: Callable[..., httpx.AsyncClient], store: InMemoryStateStore, model: ScriptedModel
) -> None:
    reader, writer = bearer(idp.token(scope="sessions:read")), bearer(idp.token(scope="messages:write"))
    agui = {
        "threadId": "t1",
        "runId": "r1",
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
        "state": None,
        "tools": [],
        "context": [],
        "forwardedProps": None,
    }
    a2a = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}},
    }
    async with serve() as client:
        for path, body in (("/agui/bot", agui), ("/a2a/bot", a2a)):
            r = await client.post(path, json=body, headers=reader)
            assert r.status_code == 403, (path, r.text)
        assert (await client.get("/v1/models", headers=reader)).status_code == 200
        assert model.requests == []
        assert await store.load("alice", "t1", agent="bot") is None
        r = await client.post("/agui/bot", json=agui, headers=writer)  # the same body, with the scope
        assert r.status_code == 200, r.text
        assert len(model.requests) == 1


async def test_knowledge_routes_need_the_knowledge_scopes(idp: Idp, store: InMemoryStateStore) -> None:
    from agentrt.knowledge import Knowledge, MemoryKnowledgeStore

    kb_store = MemoryKnowledgeStore()
    app = create_app(
        make_agent(), store=store, auth=OidcAuth(idp.issuer, AUD), knowledge=Knowledge("docs", store=kb_store)
    )
    reader = bearer(idp.token(scope="knowledge:read"))
    writer = bearer(idp.token(scope="knowledge:write"))
    doc = {"text": "The vault is blue.", "source": "plan.md"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
        r = await client.post("/v1/knowledge/docs/documents", json=doc, headers=reader)
        assert r.status_code == 403
        assert await kb_store.kbs("alice") == []  # nothing was added
        assert (await client.post("/v1/knowledge/docs/documents", json=doc, headers=writer)).status_code == 201
        assert (await client.get("/v1/knowledge/docs/documents", headers=writer)).status_code == 403
        found = await client.get("/v1/knowledge/docs/search", params={"q": "vault"}, headers=reader)
        assert [p["source"] for p in found.json()["passages"]] == ["plan.md"]
        r = await client.delete("/v1/knowledge/docs/documents", params={"source": "plan.md"}, headers=reader)
        assert r.status_code == 403
        assert [
            d["source"] for d in (await client.get("/v1/knowledge/docs/documents", headers=reader)).json()["documents"]
        ] == ["plan.md"]


async def test_roles_under_a_prefix_and_a_dotted_claim(idp: Idp, serve: Callable[..., httpx.AsyncClient]) -> None:
    auth = OidcAuth(idp.issuer, AUD, scopes_claim="realm_access.roles", scope_prefix="agentrt:", default_scopes=())
    roles = {"roles": ["offline_access", "agentrt:sessions:read", "sessions:write", "messages:write"]}
    token = bearer(idp.token(realm_access=roles))  # Keycloak's realm roles
    async with serve(auth=auth) as client:
        assert (await client.get(S, headers=token)).status_code == 200
        # "messages:write" lacks the prefix: it does not count.
        assert (await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=token)).status_code == 403


async def test_api_keys_and_tokens_together(idp: Idp, serve: Callable[..., httpx.AsyncClient]) -> None:
    keys = {"key-svc": "svc", "key-ro": {"user": "auditor", "scopes": ["sessions:read"]}}
    async with serve(api_keys=keys) as client:  # api_keys + auth: both accepted, keys first
        for headers in ({"Authorization": "Bearer key-svc"}, bearer(idp.token())):
            assert (await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=headers)).status_code == 200
        ro = {"Authorization": "Bearer key-ro"}
        assert (await client.get(S, headers=ro)).status_code == 200
        assert (await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=ro)).status_code == 403
        r = await client.get(S, headers={"Authorization": "Bearer key-unknown"})
        assert r.status_code == 401
        assert "key-unknown" not in r.text
    # A key is a digest lookup: no key reached the provider (only the one token did, once).
    assert idp.hits == {"discovery": 1, "jwks": 1}


async def test_combined_auth_and_principals(idp: Idp) -> None:
    keys = ApiKeyAuth({"key-1": "svc"})
    auth = CombinedAuth([keys, OidcAuth(idp.issuer, AUD)])
    everything = frozenset(s.value for s in Scope)
    assert await auth.authenticate("Bearer key-1") == Principal("svc", everything, "key:" + keys.key_id("key-1"))
    principal = await auth.authenticate("Bearer " + idp.token(scope="knowledge:read"))
    assert (principal.user_id, principal.scopes) == ("alice", frozenset({"knowledge:read"}))
    assert principal.allows(Scope.KNOWLEDGE_READ)
    assert not principal.allows(Scope.KNOWLEDGE_WRITE)
    assert principal.allows(None)
    assert "key-1" not in repr(auth)
    with pytest.raises(UserError):
        CombinedAuth([])


async def test_rate_limits_are_per_token_user(idp: Idp, serve: Callable[..., httpx.AsyncClient]) -> None:
    alice, bob = bearer(idp.token(sub="alice")), bearer(idp.token(sub="bob"))
    async with serve(rate_limit=RateLimit(rate=0.01, burst=2)) as client:
        assert [(await client.get(S, headers=alice)).status_code for _ in range(3)] == [200, 200, 429]
        assert (await client.get(S, headers=bob)).status_code == 200
        # A fresh token of the same user shares the user's bucket.
        assert (await client.get(S, headers=bearer(idp.token(sub="alice", jti="another")))).status_code == 429


# -- the JWKS cache ---------------------------------------------------------------------------------------------------
async def test_the_jwks_is_fetched_again_after_its_ttl_and_kept_when_that_fails(
    idp: Idp, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    auth = OidcAuth(idp.issuer, AUD, jwks_ttl=600, refetch_interval=30, clock=lambda: now[0])
    token = "Bearer " + idp.token()
    await auth.authenticate(token)
    now[0] = 599.0
    await auth.authenticate(token)
    assert idp.hits == {"discovery": 1, "jwks": 1}
    now[0] = 601.0
    await auth.authenticate(token)
    assert idp.hits == {"discovery": 1, "jwks": 2}  # the JWKS URL is discovered once
    await idp.__aexit__()  # the provider goes away
    now[0] = 1300.0
    assert (await auth.authenticate(token)).user_id == "alice"  # the known keys stay in use
    assert "could not fetch the OIDC provider's keys" in caplog.text
    assert token[7:] not in caplog.text


async def test_a_provider_that_cannot_be_reached_is_503_and_is_not_hammered(
    idp: Idp, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    port = free_port()  # nothing listens there
    auth = OidcAuth(f"http://127.0.0.1:{port}", AUD, clock=lambda: now[0], timeout=2)
    for _ in range(3):
        with pytest.raises(ApiError) as info:
            await auth.authenticate("Bearer " + idp.token())
        assert info.value.status == 503
        assert info.value.code == "auth_unavailable"
        assert info.value.headers["Retry-After"] == "30"
    assert auth.fetches == 1  # one attempt per refetch_interval
    now[0] = 31.0
    with pytest.raises(ApiError, match="cannot be fetched"):
        await auth.authenticate("Bearer " + idp.token())
    assert auth.fetches == 2
    with pytest.raises(UserError, match="cannot fetch"):
        await auth.refresh()


async def test_a_shared_secret_checks_hmac_tokens_without_any_jwks(idp: Idp) -> None:
    secret = "s" * 32
    auth = OidcAuth(idp.issuer, AUD, shared_secret=secret)
    now = int(time.time())
    token = jwt.encode({"iss": idp.issuer, "aud": AUD, "sub": "carol", "exp": now + 60}, secret, algorithm="HS256")
    assert (await auth.authenticate("Bearer " + token)).user_id == "carol"
    assert not auth.uses_jwks
    assert idp.hits == {}
    with pytest.raises(ApiError, match="invalid or expired"):
        await auth.authenticate("Bearer " + idp.token())  # RS256: not among the accepted algorithms


@pytest.mark.parametrize(
    ("args", "options", "match"),
    [
        (("https://idp.example", AUD), {"algorithms": ["none"]}, "never accepted"),
        (("https://idp.example", AUD), {"algorithms": ["RS256", "HS256"]}, "needs a shared_secret"),
        (("https://idp.example", AUD), {"algorithms": ["XS1"]}, "unsupported"),
        (("https://idp.example", AUD), {"shared_secret": "short"}, "32 bytes"),
        (("http://idp.example", AUD), {}, "https://"),
        (("https://idp.example", ""), {}, "audience"),
        (("https://idp.example", AUD), {"default_scopes": ["root"]}, "unknown scope"),
        (("https://idp.example", AUD), {"leeway": -1}, "leeway"),
        (("https://idp.example", AUD), {"jwks_url": "ftp://idp.example/jwks"}, "jwks_url"),
    ],
)
def test_settings_are_checked_when_built(args: tuple[str, str], options: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        OidcAuth(*args, **options)


def test_without_pyjwt_building_an_oidc_auth_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jwt", None)  # import jwt raises ImportError
    with pytest.raises(UserError, match=r"pip install 'agentrt\[server\]'"):
        OidcAuth("https://idp.example", AUD)


def test_rate_limit_buckets_are_bounded() -> None:
    from agentrt.server._auth import RateLimiter

    now = [0.0]
    limiter = RateLimiter(RateLimit(rate=1.0, burst=1), clock=lambda: now[0], max_buckets=3)
    assert limiter.acquire("a") == 0
    assert limiter.acquire("a") > 0  # a's bucket is empty
    for user in ("b", "c", "d"):
        assert limiter.acquire(user) == 0
    assert limiter.acquire("b") > 0  # recently used: kept
    assert limiter.acquire("a") == 0  # the least recently used bucket went first: a starts afresh


def test_an_http_provider_on_a_private_network_needs_allow_http() -> None:
    auth = OidcAuth("http://keycloak:8080/realms/acme", AUD, allow_http=True)
    assert "keycloak" in repr(auth)


# -- agentrt serve ----------------------------------------------------------------------------------------------------
def test_config_file_env_and_options(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(
        """
[api_keys]
"sk-1" = "alice"
"sk-ro" = { user = "auditor", scopes = ["sessions:read"] }

[oidc]
issuer = "https://idp.example/realms/acme"
audience = "agentrt"
scopes_claim = ["scope", "realm_access.roles"]
default_scopes = ["sessions:read"]
leeway = 30
"""
    )
    config = load_config(path, environ={"AGENTRT_OIDC_AUDIENCE": "agentrt,agentrt-web"})
    assert config.oidc["audience"] == ["agentrt", "agentrt-web"]
    config.with_oidc(user_claim="email", issuer=None)
    options = config.auth_options()
    assert isinstance(options["api_keys"], ApiKeyAuth)
    auth = options["auth"]
    assert isinstance(auth, OidcAuth)
    assert (auth.issuer, auth.user_claim, auth.leeway) == ("https://idp.example/realms/acme", "email", 30.0)
    assert auth.default_scopes == {"sessions:read"}
    app = create_app(make_agent(), **config.app_options())
    assert isinstance(app.state.agentrt.auth, CombinedAuth)
    # OIDC alone, from the environment only
    alone = load_config(None, environ={"AGENTRT_OIDC_ISSUER": "https://idp.example", "AGENTRT_OIDC_AUDIENCE": "a"})
    assert set(alone.auth_options()) == {"auth"}
    with pytest.raises(UserError, match="audience missing"):
        load_config(None, environ={"AGENTRT_OIDC_ISSUER": "https://idp.example"}).auth_options()
    for bad, match in [
        ('[oidc]\nissuer = "https://x"\ncolour = 1\n', "unknown oidc setting"),
        ('[oidc]\nissuer = "https://x"\nleeway = "soon"\n', "leeway"),
        ('[api_keys]\n"k" = { user = "u", scopes = ["root"] }\n', "unknown scope"),
        ('[api_keys]\n"k" = { name = "u" }\n', "api_keys"),
    ]:
        path.write_text(bad)
        with pytest.raises(UserError, match=match):
            load_config(path, environ={})


def test_an_app_needs_keys_or_an_issuer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRT_API_KEYS", raising=False)
    with pytest.raises(UserError, match="no API keys or token issuer configured"):
        create_app(make_agent())
    with pytest.raises(UserError, match="no API keys or token issuer"):
        create_app(make_agent(), auth=CombinedAuth([ApiKeyAuth({})]))
    with pytest.raises(UserError, match="not an authenticator"):
        CombinedAuth(["key"])  # type: ignore[list-item]


def _serve_env() -> dict[str, str]:
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(Path(__file__).with_name("apps"))])}
    for name in list(env):
        if name.startswith(("AGENTRT_API_KEYS", "AGENTRT_OIDC_", "AGENTRT_CONFIG")):
            del env[name]
    return env


def test_serve_without_keys_or_issuer_fails_at_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", "serve", "served:agents", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=_serve_env(),
        timeout=60,
    )
    assert done.returncode == 1
    assert "no API keys or token issuer configured" in done.stderr


@pytest.mark.slow
async def test_agentrt_serve_with_oidc_options(idp: Idp) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "agentrt.cli", "serve", "served:agents", "--port", str(port), "--store", "memory://"]
    cmd += ["--oidc-issuer", idp.issuer, "--oidc-audience", AUD, "--oidc-user-claim", "preferred_username"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=_serve_env(), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for _ in range(600):
                assert proc.returncode is None, "agentrt serve exited"
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            token = bearer(idp.token(preferred_username="dana"))
            r = await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=token)
            assert r.status_code == 200, r.text
            assert r.json()["message"]["content"][0]["text"] == "echo: hi (turn 1)"
            assert (await client.get(S, headers=token)).json()["sessions"][0]["session_id"] == "s1"
            assert (await client.get(S, headers={"Authorization": "Bearer nope"})).status_code == 401
    finally:
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert idp.hits == {"discovery": 1, "jwks": 1}
    assert token["Authorization"][7:] not in stderr.decode()
