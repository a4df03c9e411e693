"""An interim HTTP front end on ``twisted.web``, until the streaming data plane lands.

It routes by host and path, answers the internal endpoints (``/ping``, ``/healthz``,
``/robots.txt``), serves ``redirect`` routes, forwards public routes through a pooled
``Agent``, and refuses every other route with 401 (the identity issue adds sign-in).
The data-plane issue replaces it with llhttp-based protocols and full flow control.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.client import Agent, FileBodyProducer, HTTPConnectionPool, ResponseDone
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from gateway.config.routes import Route
from gateway.config.snapshot import Snapshot
from gateway.dataplane.router import match_route, upstream_path

HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
     b"trailer", b"transfer-encoding", b"upgrade", b"proxy-connection"}
)
ROBOTS = b"User-agent: *\nDisallow: /"
# Module level: a Logger class attribute would take the class name as its namespace.
_access_log = Logger(namespace="gateway.access")


class _QuietPool(HTTPConnectionPool):
    """A pool whose per-connection factories do not log every start and stop."""

    class _factory(HTTPConnectionPool._factory):  # type: ignore[valid-type,misc]
        noisy = False

    def __init__(self, reactor: Any) -> None:
        HTTPConnectionPool.__init__(self, reactor, persistent=True)


class AccessLoggingSite(Site):
    """Writes one structured access event per request in ``gateway.access``."""

    def __init__(self, resource: Resource) -> None:
        Site.__init__(self, resource)

    def log(self, request: http.Request) -> None:
        client = request.getClientAddress()
        _access_log.info(
            "{method} {host}{path} {status}",
            method=request.method.decode("latin-1"),
            host=(request.getHeader(b"host") or b"").decode("latin-1"),
            path=request.uri.decode("latin-1"),
            status=request.code,
            bytes=request.sentLength,
            client=getattr(client, "host", ""),
            user_agent=(request.getHeader(b"user-agent") or b"").decode("latin-1"),
        )


class _Relay(Protocol):
    """Writes the upstream body to the downstream request as it arrives."""

    def __init__(self, request: Request, done: Deferred[None]) -> None:
        self.request = request
        self.done = done

    def dataReceived(self, data: bytes) -> None:
        self.request.write(data)

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:  # noqa: B008
        self.done.callback(None)


class InterimProxy(Resource):
    """The whole site of the proxy listener."""

    isLeaf = True
    log = Logger()

    def __init__(self, snapshot: Callable[[], Snapshot], reactor: Any, tls: bool) -> None:
        Resource.__init__(self)
        self._snapshot = snapshot
        self._reactor = reactor
        self._clock: IReactorTime = reactor
        self._scheme = b"https" if tls else b"http"
        self._agent = Agent(reactor, pool=_QuietPool(reactor))

    def render(self, request: Request) -> bytes | int:
        snapshot = self._snapshot()
        path = (request.path or b"/").decode("latin-1")
        method = request.method
        if path in ("/ping", "/healthz"):
            if method not in (b"GET", b"HEAD"):
                return self._plain(request, 405, b"Method Not Allowed\n")
            return self._plain(request, 200, b"OK\n")
        host = (request.getHeader(b"host") or b"").decode("latin-1")
        route = match_route(snapshot.routes, host, path)
        self._security_headers(request, snapshot, route)
        if path == "/robots.txt" and not (route and route.allow_public_unauthenticated_access):
            return self._plain(request, 200, ROBOTS, b"text/plain; charset=utf-8")
        if route is None:
            return self._plain(request, 404, f"{host} route unknown\n".encode())
        if route.redirect is not None:
            return self._redirect(request, route, host)
        if not route.allow_public_unauthenticated_access:
            return self._plain(request, 401, b"401 Unauthorized: this route requires sign-in\n")
        self._forward(request, route, path)
        return NOT_DONE_YET

    def _plain(self, request: Request, code: int, body: bytes,
               ctype: bytes = b"text/plain; charset=utf-8") -> bytes:
        request.setResponseCode(code)
        request.setHeader(b"content-type", ctype)
        return b"" if request.method == b"HEAD" else body

    def _security_headers(self, request: Request, snapshot: Snapshot, route: Route | None) -> None:
        merged = dict(snapshot.options.set_response_headers)
        if route is not None:
            merged.update(route.set_response_headers)
        for name, value in merged.items():
            request.setHeader(name.encode(), value.encode())

    def _redirect(self, request: Request, route: Route, host: str) -> bytes:
        spec = route.redirect
        assert spec is not None
        scheme = "https" if spec.https_redirect else spec.scheme_redirect or self._scheme.decode()
        target_host = spec.host_redirect or host.rsplit(":", 1)[0]
        port = f":{spec.port_redirect}" if spec.port_redirect else ""
        path = (request.path or b"/").decode("latin-1")
        if spec.path_redirect:
            path = spec.path_redirect
        elif spec.prefix_rewrite is not None:
            matched = route.prefix or route.path or "/"
            path = spec.prefix_rewrite + path[len(matched):]
        query = request.uri.partition(b"?")[2].decode("latin-1")
        location = f"{scheme}://{target_host}{port}{path}"
        if query and not spec.strip_query:
            location += "?" + query
        request.setHeader(b"location", location.encode())
        return self._plain(request, spec.response_code, b"")

    def _forward(self, request: Request, route: Route, path: str) -> None:
        upstream = route.to[0]
        query = request.uri.partition(b"?")[2]
        target = f"{upstream.scheme}://{upstream.host}:{upstream.port}"
        url = (target + upstream_path(route, upstream, path)).encode()
        if query:
            url += b"?" + query
        headers = Headers()
        for name, values in request.requestHeaders.getAllRawHeaders():
            low = name.lower()
            if low in HOP_BY_HOP or low == b"host" or low.startswith(b"x-gateway-"):
                continue
            if low.decode("latin-1") in {h.lower() for h in route.remove_request_headers}:
                continue
            headers.setRawHeaders(name, values)
        if route.preserve_host_header:
            host_header = request.getHeader(b"host") or b""
        else:
            host_header = (route.host_rewrite or upstream.host).encode()
        headers.setRawHeaders(b"host", [host_header])
        client = request.getClientAddress()
        client_ip = getattr(client, "host", "")
        if not self._skip_xff():
            prior = request.getHeader(b"x-forwarded-for")
            xff = f"{prior.decode('latin-1')}, {client_ip}" if prior else client_ip
            headers.setRawHeaders(b"x-forwarded-for", [xff.encode()])
        headers.setRawHeaders(b"x-forwarded-proto", [self._scheme])
        headers.setRawHeaders(b"x-forwarded-host", [request.getHeader(b"host") or b""])
        for set_name, set_value in route.set_request_headers.items():
            headers.setRawHeaders(set_name.encode(), [set_value.encode()])
        content = request.content
        producer = None
        if content is not None:
            content.seek(0)
            if content.read(1):
                content.seek(0)
                producer = FileBodyProducer(content)
        d = self._agent.request(request.method, url, headers, producer)
        d.addTimeout(route.timeout, self._clock)
        d.addCallback(self._relay, request)
        d.addErrback(self._failed, request, url)
        request.notifyFinish().addErrback(lambda _: d.cancel())

    def _skip_xff(self) -> bool:
        return self._snapshot().options.skip_xff_append

    def _relay(self, response: IResponse, request: Request) -> Deferred[None]:
        request.setResponseCode(response.code, response.phrase)
        for name, values in response.headers.getAllRawHeaders():
            if name.lower() not in HOP_BY_HOP and name.lower() != b"content-length":
                request.responseHeaders.setRawHeaders(name, values)
        if response.length is not None and isinstance(response.length, int):
            request.setHeader(b"content-length", str(response.length).encode())
        done: Deferred[None] = Deferred()
        response.deliverBody(_Relay(request, done))
        done.addCallback(self._finish, request)
        return done

    @staticmethod
    def _finish(_: None, request: Request) -> None:
        if not request.finished and not request._disconnected:
            request.finish()

    def _failed(self, failure: Failure, request: Request, url: bytes) -> None:
        if request.finished or request._disconnected:
            return
        timed_out = failure.check(TimeoutError, CancelledError)
        code = 504 if timed_out else 502
        self.log.warn("upstream {url} failed: {error}", url=url.decode("latin-1"),
                      error=failure.getErrorMessage(), status=code)
        if request.startedWriting:
            request.loseConnection()
            return
        request.setResponseCode(code)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        request.write(b"504 Gateway Timeout\n" if timed_out else b"502 Bad Gateway\n")
        request.finish()
