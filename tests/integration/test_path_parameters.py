"""Issue 39: ``;`` path parameters against real servlet containers.

``/private;x/admin/x`` passed ``deny: http_path starts_with /private/admin`` and
``/secure;jsessionid=1/doc`` landed on the catch-all route instead of ``/secure/``, while
Tomcat and Jetty (which drop parameters from every segment) served ``/private/admin/x``
and ``/secure/doc``. Here both containers (Debian's tomcat10 and jetty9, see
``tests/support/servlet_containers.py``) serve a tree of files naming themselves, behind
one daemon, and for every trick in ``TABLE`` what the policy decided (the route, named by
its ``X-Route`` response header, and allow or deny) is checked against the resource the
container served: the same resource, or the request refused. The same table goes through
HTTP/2 (same answers as HTTP/1.1) and forward authentication (the decision for the
resource the container itself serves for that target, asked without the gateway).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import in_ci
from tests.support import servlet_containers
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.h2client import H2Client
from tests.support.processes import wait_until
from tests.support.rawhttp import one_shot, status_of
from tests.support.servlet_containers import Container

pytestmark = pytest.mark.integration

SIGN_IN = {"authenticate_service_url": "https://auth.test", "idp_provider": "oidc",
           "idp_provider_url": "http://127.0.0.1:9", "idp_client_id": "gateway",
           "idp_client_secret": "secret"}
FWD = "fwd.test"
RESOURCES = ("app", "private/admin/x", "private/x", "secure/doc", "secure/admin/x",
             "public/x", "login", "admin")
REFUSED = (400, 401, 403)

# what each route's deny rules say (below): (operator, value) of ``http_path``
DENY = {"secure": (("starts_with", "/secure/admin"),), "login": (),
        "catch-all": (("starts_with", "/private/admin"), ("is", "/admin"))}


def route_of(path: str) -> str:
    """The route the config below gives ``path`` (no parameters in it)."""
    if path.startswith("/secure/"):
        return "secure"
    return "login" if path == "/login" else "catch-all"


def denied(path: str) -> bool:
    return any(path == value if operator == "is" else path.startswith(value)
               for operator, value in DENY[route_of(path)])


def routes(host: str, url: str) -> list[dict[str, object]]:
    def allow(*deny: dict[str, object]) -> list[dict[str, object]]:
        rules: list[dict[str, object]] = [{"allow": {"or": [{"accept": True}]}}]
        return rules + ([{"deny": {"or": list(deny)}}] if deny else [])
    return [
        {"from": f"https://{host}", "to": url, "prefix": "/secure/",
         "set_response_headers": {"X-Route": "secure"},
         "policy": allow(*({"http_path": {operator: value}}
                           for operator, value in DENY["secure"]))},
        {"from": f"https://{host}", "to": url, "path": "/login",
         "set_response_headers": {"X-Route": "login"}, "policy": allow()},
        {"from": f"https://{host}", "to": url, "set_response_headers": {"X-Route": "catch-all"},
         "policy": allow(*({"http_path": {operator: value}}
                           for operator, value in DENY["catch-all"]))},
    ]


# (request target, expected outcome): "deny" (401 or 403), "bad" (400), "missing" (the
# policy allowed it; the container has no such resource: 404), or the resource served
TABLE: list[tuple[str, str]] = [
    ("/private/admin/x", "deny"),
    ("/private;x/admin/x", "deny"),
    ("/private;/admin/x", "deny"),
    ("/private%3bx/admin/x", "deny"),
    ("/private%3Bx/admin/x", "deny"),
    ("/private%3b/admin/x", "deny"),
    ("/private/admin;x/x", "deny"),
    ("/private/admin;/x", "deny"),
    ("/private/;x/admin/x", "deny"),
    ("/;x/private/admin/x", "deny"),
    ("/;/private/admin/x", "deny"),
    ("/private;a=1;b=2/admin/x", "deny"),
    ("/%70rivate;x/admin/x", "deny"),
    ("/private/admin/x;y", "deny"),
    ("/private/admin/x;", "deny"),
    ("/private/admin/x%3By", "deny"),
    ("//private/admin/x", "deny"),
    ("/private//admin/x", "deny"),
    ("/private;x/admin/x?a=;b", "deny"),
    ("/private/admin./x", "deny"),  # a string prefix of the deny: refused all the same
    ("/private/admin.;x/x", "deny"),
    ("/admin;", "deny"),
    ("/admin;x=1", "deny"),
    ("/private%253bx/admin/x", "missing"),  # one decoding: a literal "%3b" to them
    ("/private%252fadmin/x", "missing"),
    ("/PRIVATE/admin/x", "missing"),
    ("/Private;x/Admin/x", "missing"),
    ("/private./admin/x", "missing"),  # no trailing-dot folding on Linux
    ("/private%2fadmin/x", "bad"),  # Jetty would serve /private/admin/x
    ("/private%2Fadmin/x", "bad"),
    ("/private%5cadmin/x", "bad"),
    ("/private%5Cadmin/x", "bad"),
    ("/private\\admin/x", "bad"),
    ("/public/..;x/private/admin/x", "bad"),
    ("/public/%2e%2e;/private/admin/x", "bad"),
    ("/public/..%3B/private/admin/x", "bad"),
    ("/secure/doc", "secure/doc"),
    ("/secure;jsessionid=1/doc", "secure/doc"),
    ("/secure%3bjsessionid=1/doc", "secure/doc"),
    ("/secure/doc;jsessionid=1", "secure/doc"),
    ("/secure;x/admin/x", "deny"),
    ("/secure/admin;x/x", "deny"),
    ("/secure/./admin;/x", "deny"),
    ("/login;x", "login"),
    ("/login;jsessionid=1", "login"),
    ("/app;jsessionid=1", "app"),
    ("/app;", "app"),
    ("/app%3bjsessionid=1", "missing"),  # routed as /app; a literal "app;jsessionid=1"
    ("/public/x;v=1", "public/x"),
    ("/private;x/x", "private/x"),
]


@dataclass(frozen=True)
class Reply:
    status: int
    route: str  # the X-Route response header, "" without one
    body: str

    def describe(self) -> str:
        shown = f" {self.body[:40]!r}" if self.status == 200 else ""
        return f"{self.status} {self.route or '-'}{shown}"


def parse(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    route = ""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"x-route":
            route = value.strip().decode()
    return Reply(status_of(raw), route, body.decode("latin-1"))


def get(port: int, target: str, host: str) -> Reply:
    request = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n" \
              "Connection: close\r\n\r\n"
    return parse(one_shot(port, request.encode("latin-1")))


@dataclass
class Setup:
    gateway: Daemon
    containers: list[Container]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    lacking = servlet_containers.missing()
    if lacking is not None:
        message = f"{lacking} is missing ({servlet_containers.SERVLET_HINT})"
        if in_ci():
            pytest.fail(message + "; CI is set, so this fails instead of skipping")
        pytest.skip(message)
    tmp = tmp_path_factory.mktemp("path-parameters")
    with servlet_containers.tomcat(tmp, RESOURCES) as tomcat, \
            servlet_containers.jetty(tmp, RESOURCES) as jetty:
        policy = routes("tomcat.test", tomcat.url) + routes("jetty.test", jetty.url)
        config = {**SIGN_IN, "codec_type": "auto", "forward_auth_url": f"https://{FWD}",
                  "policy": policy}
        with gateway_daemon(tmp, config) as gw:
            yield Setup(gw, [tomcat, jetty])


def check(target: str, expected: str, reply: Reply) -> str | None:
    """What is wrong with ``reply`` to ``target``, or None."""
    if reply.status == 200:
        served = "/" + reply.body
        if reply.route != route_of(served):
            return f"served {served} through route {reply.route!r}"
        if denied(served):
            return f"served {served}, which its route's policy denies"
    if expected == "deny":
        return None if reply.status in (401, 403) else "expected 401/403"
    if expected == "bad":
        return None if reply.status == 400 else "expected 400"
    if expected == "missing":
        return None if reply.status == 404 and reply.route else "expected the container's 404"
    if reply.status != 200 or reply.body != expected:
        return f"expected {expected}"
    return None


def table_text(rows: list[tuple[str, str, dict[str, str]]]) -> str:
    names = list(rows[0][2]) if rows else []
    lines = [f"{'target':34} {'expected':12} " + " | ".join(f"{n:28}" for n in names)]
    for target, expected, seen in rows:
        lines.append(f"{target:34} {expected:12} " + " | ".join(f"{seen[n]:28}" for n in names))
    return "\n".join(lines)


def test_table_through_the_gateway(setup: Setup) -> None:
    """Every trick: what the route and policy decided is what the container served, or
    the request was refused; HTTP/2 answers as HTTP/1.1 does."""
    assert len(TABLE) >= 30
    rows: list[tuple[str, str, dict[str, str]]] = []
    problems: list[str] = []
    h2 = {c.name: H2Client(setup.gateway.port) for c in setup.containers}
    try:
        for target, expected in TABLE:
            seen: dict[str, str] = {}
            for container in setup.containers:
                host = f"{container.name}.test"
                reply = get(setup.gateway.port, target, host)
                seen[container.name] = reply.describe()
                wrong = check(target, expected, reply)
                if wrong is not None:
                    problems.append(f"{container.name} {target}: {reply.describe()}: {wrong}")
                answer = h2[container.name].request("GET", target, host)
                route = dict(answer.headers).get("x-route", "")
                again = Reply(answer.status, route, answer.body.decode("latin-1"))
                if (again.status, again.route) != (reply.status, reply.route) or (
                        reply.status == 200 and again.body != reply.body):
                    problems.append(f"{container.name} {target} over HTTP/2: "
                                    f"{again.describe()}, HTTP/1.1 {reply.describe()}")
            rows.append((target, expected, seen))
    finally:
        for client in h2.values():
            client.close()
    print("\n" + table_text(rows))
    assert not problems, "\n".join(problems) + "\n\n" + table_text(rows)


def test_forward_auth_decides_for_what_the_container_serves(setup: Setup) -> None:
    """Forward auth does not carry the request: the proxy in front sends the target as
    the client wrote it. For every target a container serves (asked directly), the
    gateway's answer is the policy's for the resource served, or a refusal."""
    problems: list[str] = []
    served_rows = 0
    for target, _ in TABLE:
        for container in setup.containers:
            direct = get(container.port, target, "127.0.0.1")
            host = f"{container.name}.test"
            decision = get(setup.gateway.port, f"/verify?uri=https://{host}{target}", FWD)
            if direct.status != 200:
                continue
            served_rows += 1
            resource = "/" + direct.body
            if denied(resource):
                if decision.status not in REFUSED:
                    problems.append(f"{container.name} {target}: serves {resource} (denied) "
                                    f"and forward auth answered {decision.status}")
            elif decision.status not in (200, 400):
                problems.append(f"{container.name} {target}: serves {resource} (allowed) "
                                f"and forward auth answered {decision.status}")
    assert served_rows >= 40, served_rows
    assert not problems, "\n".join(problems)


def test_reject_mode(setup: Setup, tmp_path: Path) -> None:
    """``path_with_parameters_action: reject``, set by a reload: parameters on an inner
    segment get 400 (HTTP/1.1, HTTP/2, forward auth); the last segment's pass, as with
    ``strip``."""
    tomcat = setup.containers[0]
    config = {**SIGN_IN, "codec_type": "auto", "forward_auth_url": f"https://{FWD}",
              "policy": routes("tomcat.test", tomcat.url)}
    with gateway_daemon(tmp_path, config) as gw, H2Client(gw.port) as h2:
        assert get(gw.port, "/secure;x/doc", "tomcat.test").body == "secure/doc"
        gw.write_config({**config, "path_with_parameters_action": "reject",
                         "address": f"127.0.0.1:{gw.port}", "insecure_server": True})
        wait_until(lambda: get(gw.port, "/secure;x/doc", "tomcat.test").status == 400, 15.0,
                   interval=0.2, what="path_with_parameters_action: reject reloaded")
        for target in ("/private;x/admin/x", "/secure%3Bx/doc", "/;x/app"):
            assert get(gw.port, target, "tomcat.test").status == 400, target
            assert h2.request("GET", target, "tomcat.test").status == 400, target
            fwd = get(gw.port, f"/verify?uri=https://tomcat.test{target}", FWD)
            assert fwd.status == 400, target
        for target, resource in (("/app;jsessionid=1", "app"), ("/secure/doc;x", "secure/doc")):
            reply = get(gw.port, target, "tomcat.test")
            assert (reply.status, reply.body) == (200, resource), (target, reply)
        assert get(gw.port, "/private/admin/x;y", "tomcat.test").status in (401, 403)


def test_containers_read_parameters_as_documented(setup: Setup) -> None:
    """The premise, asked without the gateway: both drop ``;params`` from inner
    segments (so a gateway that kept them would be bypassed), and both read ``%3B`` as a
    literal ``;`` (so treating it as a parameter cannot serve another resource)."""
    for container in setup.containers:
        assert get(container.port, "/private;x/admin/x", "h").body == "private/admin/x"
        assert get(container.port, "/secure;jsessionid=1/doc", "h").body == "secure/doc"
        assert get(container.port, "/private%3bx/admin/x", "h").status == 404
        assert get(container.port, "/app;jsessionid=1", "h").body == "app"
