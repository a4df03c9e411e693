"""Split mode with authorize on its own (issue 17's scenario): a databroker on Redis, an
authenticate, an authorize and two proxies, five processes started from one config that
differs between them only in ``services`` (and, all on one loopback host, in the ports
each listens on). The proxies ask authorize for every decision over gRPC.

A browser sign-in through proxy A works on proxy B and the upstream gets the identity
assertion authorize signed; a sign-out through A ends the session on B within a second;
a proxy with another shared_secret is refused ("shared_secret differs" on both sides)
and answers 503 while the others go on; authorize killed: 503 with a clear body, never
an allow; authorize back on the same address: the proxies recover without a restart."""

from __future__ import annotations

import base64
import http.client
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.bearer_tokens import jwks_bytes, mint_now, rsa_key
from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.kvstore import COOKIE, SECRET
from tests.support.peers import echo_upstream, oidc_provider, redis_server
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration

OTHER_SECRET = "b3RoZXJvdGhlcm90aGVyb3RoZXJvdGhlcm90aGVyb3Q="


BEARER_ISSUER = "https://ci.example.test"


def common_config(op: Any, redis_url: str, upstream: str, ports: dict[str, int],
                  jwks_file: Path | None = None) -> dict[str, Any]:
    """What every process reads: routes for both proxies, the services' URLs; with
    ``jwks_file``, a bearer provider whose keys it holds and a route accepting it."""
    rule = {"allowed_users": ["alice@example.test"], "pass_identity_headers": True}
    bearer: dict[str, Any] = {}
    if jwks_file is not None:
        bearer = {"identity_providers": [
            {"id": "ci", "issuer": BEARER_ISSUER, "jwks_file": str(jwks_file),
             "bearer": {"audiences": ["gateway"]}}]}
    return {**bearer,
        "authenticate_service_url": f"http://auth.test:{ports['authenticate']}",
        "authorize_service_url": f"http://127.0.0.1:{ports['authorize_grpc']}",
        "databroker_service_url": f"http://127.0.0.1:{ports['databroker_grpc']}",
        "databroker_storage_type": "kvstore",
        "databroker_storage_connection_string": redis_url,
        "idp_provider": "oidc", "idp_provider_url": op.issuer,
        "idp_client_id": op.client_id, "idp_client_secret": op.client_secret,
        "idp_scopes": ["openid", "email", "groups", "offline_access"],
        "cookie_secure": False, "shared_secret": SECRET, "cookie_secret": COOKIE,
        "grpc_insecure": True, "grpc_client_timeout": "2s",
        "jwt_claims_headers": {"x-email": "email"},
        "policy": [{"from": f"http://app.test:{ports[name]}", "to": upstream, **rule}
                   for name in ("a", "b", "c")] + [
            # the policy language in split mode: authorize evaluates it, the proxy
            # only carries out the decision
            {"from": f"http://policy.test:{ports['a']}", "to": upstream, "policy": [
                {"allow": {"or": [{"email": {"is": "alice@example.test"}}]}},
                {"deny": {"or": [{"http_method": {"is": "DELETE"}},
                                 {"http_path": {"starts_with": "/admin"}}]}}]}] + ([
            # bearer tokens in split mode: authorize holds the keys and verifies
            {"from": f"http://deploy.test:{ports['a']}", "to": upstream,
             "identity_providers": ["ci"], "pass_identity_headers": True,
             "policy": [{"allow": {"and": [{"provider": {"is": "ci"}},
                                           {"claim/ref": {"has": "refs/heads/main"}}]}}]}]
            if jwks_file is not None else []),
    }


def process_config(common: dict[str, Any], services: str, ports: dict[str, int],
                   **extra: Any) -> dict[str, Any]:
    config = {**common, "services": services, **extra}
    if services in ("databroker", "authorize"):
        config["grpc_address"] = f"127.0.0.1:{ports[services + '_grpc']}"
    return config


def test_proxies_ask_a_separate_authorize(tmp_path: Path, require_binary: Any) -> None:
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    names = ("authenticate", "a", "b", "c", "databroker_grpc", "authorize_grpc")
    ports = {name: free_port() for name in names}
    for d in ("databroker", "authorize", "authorize2", "authenticate", "a", "b", "c"):
        (tmp_path / d).mkdir()
    callbacks = [f"http://auth.test:{ports['authenticate']}/oauth2/callback"]
    with redis_server(tmp_path) as redis, oidc_provider(tmp_path, callbacks) as op, \
            echo_upstream(tmp_path) as up:
        jwks_file = tmp_path / "ci-jwks.json"
        jwks_file.write_bytes(jwks_bytes((rsa_key("split-ci"), "ci-1")))
        common = common_config(op, f"kvstore://127.0.0.1:{redis.port}/0", up.url, ports,
                               jwks_file)
        contexts: list[Any] = []  # authorize's, stopped last (it is restarted)
        with gateway_daemon(tmp_path / "databroker",
                            process_config(common, "databroker", ports),
                            ready_port=ports["databroker_grpc"]):
            try:
                contexts.append(gateway_daemon(tmp_path / "authorize",
                                               process_config(common, "authorize", ports),
                                               ready_port=ports["authorize_grpc"]))
                authorize = contexts[0].__enter__()
                with gateway_daemon(tmp_path / "authenticate",
                                    process_config(common, "authenticate", ports),
                                    port=ports["authenticate"]), \
                        gateway_daemon(tmp_path / "a", process_config(common, "proxy", ports),
                                       port=ports["a"]) as a, \
                        gateway_daemon(tmp_path / "b", process_config(common, "proxy", ports),
                                       port=ports["b"]) as b:
                    _scenario(tmp_path, common, ports, authorize, a, b, contexts)
            finally:
                for context in reversed(contexts):
                    context.__exit__(None, None, None)


def _scenario(tmp_path: Path, common: dict[str, Any], ports: dict[str, int],
              authorize: Daemon, a: Daemon, b: Daemon, contexts: list[Any]) -> None:
    pa, pb = ports["a"], ports["b"]
    browser = Browser()
    reply = browser.sign_in(f"http://app.test:{pa}/first", "alice@example.test")
    assert reply.status == 200, (reply.status, reply.body[:300])
    headers = {k.lower(): v for k, v in json.loads(reply.body)["headers"]}
    assert headers["x-email"] == "alice@example.test"  # authorize's claim header
    assert headers["x-gateway-jwt-assertion"].count(".") == 2
    assert "_gateway" not in headers.get("cookie", "")
    assert browser.request("GET", f"http://app.test:{pb}/").status == 200

    # a policy route: decided by authorize request by request (method, path), with the
    # refusal in the person's words and the rule in authorize's log
    assert browser.sign_in(f"http://policy.test:{pa}/", "alice@example.test").status == 200
    assert browser.request("GET", f"http://policy.test:{pa}/page").status == 200
    refused = browser.request("DELETE", f"http://policy.test:{pa}/page")
    assert refused.status == 403, (refused.status, refused.body[:300])
    assert b"This kind of request is not allowed on this route." in refused.body
    assert browser.request("GET", f"http://policy.test:{pa}/admin/x").status == 403
    assert browser.request("GET", f"http://policy.test:{pa}/again").status == 200
    wait_until(lambda: authorize.logged("deny[0].or[0] http_method is DELETE: matched"), 5,
               what="authorize's line naming the rule")

    # issue 42: a bearer token through proxy A, verified by authorize (the proxy holds
    # no keys): allowed with authorize's assertion naming the provider and without the
    # token upstream; denied 403; refused 401 with the reason in WWW-Authenticate
    def deploy(token: str) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", pa, timeout=10)
        connection.request("GET", "/", headers={"Host": f"deploy.test:{pa}",
                                                "Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body

    ci = rsa_key("split-ci")
    status, _, body = deploy(mint_now(ci, "ci-1", iss=BEARER_ISSUER, aud="gateway"))
    assert status == 200, body[:300]
    upstream = {k.lower(): v for k, v in json.loads(body)["headers"]}
    assert "authorization" not in upstream
    payload = upstream["x-gateway-jwt-assertion"].split(".")[1]
    assert json.loads(base64.urlsafe_b64decode(payload + "=" * 4))["idp"] == "ci"
    assert deploy(mint_now(ci, "ci-1", iss=BEARER_ISSUER, aud="gateway",
                           ref="refs/heads/dev"))[0] == 403
    status, headers, _ = deploy(mint_now(ci, "ci-1", iss=BEARER_ISSUER, aud="other"))
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    wait_until(lambda: authorize.logged("bearer token refused by ci: audience"), 5,
               what="authorize's refusal line")
    assert not a.logged("bearer provider ci:")  # the proxy fetched no keys

    # issue 28: authorize applies the e-mail rules too; an address the provider marks
    # unverified does not pass allowed_users, and the 403 (rendered by authorize) says why
    denied = Browser().sign_in(f"http://app.test:{pa}/", "alice@example.test!unverified")
    assert denied.status == 403, (denied.status, denied.body[:300])
    assert b"your provider has not verified this address" in denied.body
    wait_until(lambda: authorize.logged("email-unverified"), 5,
               what="authorize's refusal line")

    # sign-out through A ends the session on B within a second (asked with a copy
    # of the cookie: the browser's own is cleared for every port of app.test)
    keeper = Browser()
    keeper.cookies["app.test"] = dict(browser.cookies["app.test"])
    assert keeper.request("GET", f"http://app.test:{pb}/z").status == 200
    browser.sign_out(f"http://app.test:{pa}")
    ended = time.monotonic()
    while keeper.request("GET", f"http://app.test:{pb}/z").status == 200:
        assert time.monotonic() - ended < 1.0, "sign-out not seen on B in 1 s"
        time.sleep(0.05)
    assert keeper.request("GET", f"http://app.test:{pb}/z").status == 302

    # a proxy with another shared_secret: refused, said on both sides, 503s
    assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test").status == 200
    cookie = browser.cookies["app.test"]["_gateway"]
    with gateway_daemon(tmp_path / "c", process_config(common, "proxy", ports,
                                                       shared_secret=OTHER_SECRET),
                        port=ports["c"]) as c:
        stranger = Browser()
        stranger.cookies["app.test"] = {"_gateway": cookie}
        reply = stranger.request("GET", f"http://app.test:{ports['c']}/")
        assert reply.status == 503, (reply.status, reply.body[:300])
        wait_until(lambda: c.logged("authorize at http://127.0.0.1") and
                   c.logged("shared_secret differs"), 5, what="the refused proxy's line")
        wait_until(lambda: authorize.logged("shared_secret differs"), 5,
                   what="authorize's log line")
        assert browser.request("GET", f"http://app.test:{pb}/").status == 200
        assert browser.request("GET", f"http://app.test:{pa}/").status == 200
    for daemon in (authorize, a, b):
        assert "Bearer" not in daemon.process.log_text()
        assert cookie not in daemon.process.log_text()

    # authorize goes away: 503 with a clear body, never "allowed"
    authorize.process.stop()
    reply = browser.request("GET", f"http://app.test:{pa}/down")
    assert reply.status == 503, (reply.status, reply.body[:300])
    assert b"authorization is unavailable" in reply.body.lower(), reply.body[:300]
    assert browser.request("GET", f"http://app.test:{pb}/down").status == 503
    # back on the same address: the proxies recover without a restart
    contexts.append(gateway_daemon(tmp_path / "authorize2",
                                   process_config(common, "authorize", ports),
                                   ready_port=ports["authorize_grpc"]))
    contexts[-1].__enter__()
    back = time.monotonic()
    for port, name in ((pa, "A"), (pb, "B")):  # each on its own backoff (<= 2 s)
        while browser.request("GET", f"http://app.test:{port}/up").status != 200:
            assert time.monotonic() - back < 10, f"proxy {name} did not recover"
            time.sleep(0.1)
    assert a.process.running and b.process.running


def key_file(path: Path) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(path)


def test_authorize_over_tls_with_one_signing_key(tmp_path: Path, require_binary: Any) -> None:
    """Authorize and the databroker serve gRPC over TLS (grpc_insecure: false, their
    certificates); the others trust them through certificate_authority (inline, base64)
    or certificate_authority_file, with override_certificate_name (the certificates name
    a service, the URLs an address). Every process has the same signing_key but proxy C:
    its assertions could not be verified with its JWKS, so it answers 503 and says
    "signing_key differs" at start; on A the assertion verifies with the JWKS that
    authenticate serves."""
    import base64

    import jwt
    import trustme

    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    ca = trustme.CA()
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem.bytes())
    for service in ("authorize", "databroker"):
        issued = ca.issue_cert(f"{service}.internal", "services.internal")
        (tmp_path / f"{service}.pem").write_bytes(issued.cert_chain_pems[0].bytes())
        (tmp_path / f"{service}.key").write_bytes(issued.private_key_pem.bytes())
    shared_key = key_file(tmp_path / "signing.pem")
    other_key = key_file(tmp_path / "other.pem")
    names = ("authenticate", "a", "b", "c", "databroker_grpc", "authorize_grpc")
    ports = {name: free_port() for name in names}  # b: a route no process serves here
    for d in ("databroker", "authorize", "authenticate", "a", "c"):
        (tmp_path / d).mkdir()
    callbacks = [f"http://auth.test:{ports['authenticate']}/oauth2/callback"]
    with redis_server(tmp_path) as redis, oidc_provider(tmp_path, callbacks) as op, \
            echo_upstream(tmp_path) as up:
        common = common_config(op, f"kvstore://127.0.0.1:{redis.port}/0", up.url, ports)
        common.update(
            grpc_insecure=False, signing_key_file=shared_key,
            authorize_service_url=f"https://127.0.0.1:{ports['authorize_grpc']}",
            databroker_service_url=f"https://127.0.0.1:{ports['databroker_grpc']}",
            certificate_authority=base64.b64encode(ca.cert_pem.bytes()).decode(),
            override_certificate_name="services.internal")

        def served(service: str) -> dict[str, Any]:
            config = process_config(common, service, ports,
                                    certificate_file=str(tmp_path / f"{service}.pem"),
                                    certificate_key_file=str(tmp_path / f"{service}.key"))
            del config["certificate_authority"]  # the file form, on these two
            config["certificate_authority_file"] = str(tmp_path / "ca.pem")
            return config

        with gateway_daemon(tmp_path / "databroker", served("databroker"),
                            ready_port=ports["databroker_grpc"]) as databroker, \
                gateway_daemon(tmp_path / "authorize", served("authorize"),
                               ready_port=ports["authorize_grpc"]) as authorize, \
                gateway_daemon(tmp_path / "authenticate",
                               process_config(common, "authenticate", ports),
                               port=ports["authenticate"]) as authenticate, \
                gateway_daemon(tmp_path / "a", process_config(common, "proxy", ports),
                               port=ports["a"]) as a, \
                gateway_daemon(tmp_path / "c", process_config(
                    common, "proxy", ports, signing_key_file=other_key),
                    port=ports["c"]) as c:
            for daemon in (databroker, authorize):
                assert "(TLS)" in daemon.process.log_text()
            browser = Browser()
            reply = browser.sign_in(f"http://app.test:{ports['a']}/", "alice@example.test")
            assert reply.status == 200, (reply.status, reply.body[:300])
            headers = {k.lower(): v for k, v in json.loads(reply.body)["headers"]}
            keys = browser.request(
                "GET", f"http://auth.test:{ports['authenticate']}/.well-known/gateway/jwks.json")
            [jwk] = json.loads(keys.body)["keys"]
            claims = jwt.decode(headers["x-gateway-jwt-assertion"],
                                jwt.PyJWK(jwk).key, algorithms=["ES256"],
                                audience=f"app.test:{ports['a']}",
                                options={"verify_aud": False})
            assert claims["email"] == "alice@example.test"
            for daemon in (a, authenticate):
                wait_until(lambda d=daemon: d.logged("use the same key (kid "), 10,
                           what="the signing-key check's agreement")

            # proxy C publishes another key: 503 on the route that passes identity
            wait_until(lambda: c.logged("signing_key differs: authorize signs identity "
                                         "assertions with kid"), 10,
                       what="C's signing-key line at start")
            wait_until(lambda: authorize.logged("signing_key differs: a gateway-proxy "
                                                 "process publishes kid"), 10,
                       what="authorize's signing-key line")
            assert "signing_key differs" not in authenticate.process.log_text()
            stranger = Browser()
            stranger.cookies["app.test"] = dict(browser.cookies["app.test"])
            reply = stranger.request("GET", f"http://app.test:{ports['c']}/")
            assert reply.status == 503, (reply.status, reply.body[:300])
            assert b"signing_key" in reply.body
            assert browser.request("GET", f"http://app.test:{ports['a']}/").status == 200


def test_authorize_spans_join_the_requests_trace(tmp_path: Path, require_binary: Any) -> None:
    """Tracing on in every process (one collector): a request through proxy A is one
    trace, authorize's server span a child of the proxy's gRPC client span (the W3C
    traceparent travels in the call's metadata)."""
    from tests.support.trace_collectors import HttpCollector, decode_zipkin, wait_for_spans

    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    names = ("authenticate", "a", "b", "c", "databroker_grpc", "authorize_grpc")
    ports = {name: free_port() for name in names}
    for d in ("databroker", "authorize", "authenticate", "a"):
        (tmp_path / d).mkdir()
    callbacks = [f"http://auth.test:{ports['authenticate']}/oauth2/callback"]
    check = "grpc gateway.authorize.v1.Authorize/Check"
    with redis_server(tmp_path) as redis, oidc_provider(tmp_path, callbacks) as op, \
            echo_upstream(tmp_path) as up, HttpCollector() as collector:
        common = common_config(op, f"kvstore://127.0.0.1:{redis.port}/0", up.url, ports)
        common.update(tracing_provider="httptrace", tracing_sample_rate=1,
                      tracing_httptrace_endpoint=f"{collector.url}/api/v2/spans")
        with gateway_daemon(tmp_path / "databroker", process_config(common, "databroker",
                                                                     ports),
                            ready_port=ports["databroker_grpc"]), \
                gateway_daemon(tmp_path / "authorize", process_config(common, "authorize",
                                                                       ports),
                               ready_port=ports["authorize_grpc"]), \
                gateway_daemon(tmp_path / "authenticate",
                               process_config(common, "authenticate", ports),
                               port=ports["authenticate"]), \
                gateway_daemon(tmp_path / "a", process_config(common, "proxy", ports),
                               port=ports["a"]):
            browser = Browser()
            reply = browser.sign_in(f"http://app.test:{ports['a']}/", "alice@example.test")
            assert reply.status == 200, (reply.status, reply.body[:300])
            assert browser.request("GET", f"http://app.test:{ports['a']}/traced").status \
                == 200

            def decode() -> list[Any]:
                return [s for r in collector.bodies() for s in decode_zipkin(r.body)]

            def joined(spans: list[Any]) -> bool:
                clients = {s.span_id: s for s in spans if s.name == check
                           and s.kind == "client"}
                return any(s.kind == "server" and s.name == check and s.parent_id in clients
                           and clients[s.parent_id].trace_id == s.trace_id for s in spans)
            spans = wait_for_spans(decode, joined)
    client = next(s for s in spans if s.name == check and s.kind == "client")
    # the client span is under the proxy's authorize span, in the request's trace
    parents = {s.span_id: s for s in spans}
    assert parents[client.parent_id].name == "authorize"
