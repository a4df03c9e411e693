"""The parts of ``gateway tcp`` wired together for one destination: endpoints to the
gateway, the token cache, the sign-in and the opener that uses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred

from gateway.cli.tcp.browser import open_in_browser
from gateway.cli.tcp.dial import GatewayConnection, dial
from gateway.cli.tcp.endpoints import GatewayEndpoints, tls_creator
from gateway.cli.tcp.opener import TunnelOpener
from gateway.cli.tcp.options import TunnelOptions
from gateway.cli.tcp.sign_in import login_url, sign_in
from gateway.cli.tcp.token_cache import TokenCache, cache_dir
from gateway.cli.tcp.wire import Refused


class TunnelClient:
    def __init__(self, reactor: Any, options: TunnelOptions, say: Callable[[str], None],
                 warn: Callable[[str], None]) -> None:
        self.reactor = reactor
        self.options = options
        self.say = say
        self.warn = warn
        gateway = options.gateway
        creator = tls_creator(gateway, options.ca_pem, options.verify_tls) if gateway.tls \
            else None
        self.endpoints = GatewayEndpoints(reactor, gateway, creator)
        self.cache = TokenCache(cache_dir(), gateway.origin, options.destination.authority)
        self.opener: TunnelOpener[GatewayConnection] = TunnelOpener(
            options.destination, gateway, self._dial, self._sign_in, self.cache, warn)

    @property
    def half_close(self) -> bool:
        """Whether an end of stream can be passed to the gateway (plain TCP only)."""
        return not self.options.gateway.tls

    def open(self) -> Deferred[GatewayConnection]:
        return Deferred.fromCoroutine(self.opener.open())

    async def _dial(self, token: str | None) -> GatewayConnection | Refused:
        return await dial(self.reactor, self.endpoints, self.options.destination.authority,
                          token)

    async def _sign_in(self) -> str:
        options = self.options
        return await sign_in(
            self.reactor, f"{options.destination} at {options.gateway.origin}",
            lambda redirect_uri: login_url(self.reactor, self.endpoints, redirect_uri),
            lambda url: open_in_browser(self.reactor, options.browser_cmd, url, self.warn),
            self.say)
