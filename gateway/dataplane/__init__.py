"""The data plane: the proxy's listeners, codecs, exchanges, upstreams and pipes.

Arrows point down this list (a package imports only from those below it):

- ``listeners``: the main listener's stack (TCP, PROXY protocol, TLS, codec switch) and
  the http->https redirector.
- ``codecs``: HTTP/1.1 (llhttp) toward clients, and the choice between it and HTTP/2.
- ``http2``: HTTP/2 toward clients: its own frame layer and HPACK, the abuse guard, the
  codec.
- ``exchange``: one request/response, shared by both codecs: routing, the gateway's own
  endpoints, the authorization hook, the upstream relay, the request head an upstream
  receives, the access log.
- ``forwardauth``: the URL a third-party proxy asks about, and the answer it gets.
- ``pipes``: kernel-side relaying of the byte pipes (``gateway.net.pipe``) once a
  connection stops being HTTP (websocket/SPDY upgrades, CONNECT tunnels).
- ``health``: active health checks and the manager running them for the current plan.
- ``core``: per-listener state (plan, pool, authorizer, timeouts watchdog).
- ``routing``: the plan compiled per configuration snapshot, host/path matching,
  redirect routes.
- ``upstream``: upstream hosts and their live state, load balancers, the HTTP/1.1
  client connection and its pool (endpoints come from ``gateway.net``).

Below the whole data plane: the authorization hook's types (``gateway.authorize.hook``)
and the wire layer (``gateway.wire``: the request-target normaliser, header rules, the
PROXY header, request ids, the gateway's own response bytes).
"""
