"""Forward authentication: a third-party reverse proxy (nginx ``auth_request``, caddy
``forward_auth``, traefik ``ForwardAuth``) carries the traffic and asks the gateway, on
the ``forward_auth_url`` host, whether a request may pass. ``target`` finds the request
being asked about, ``answer`` turns a decision into the reply the proxy understands; the
exchange's side is ``gateway.dataplane.exchange.forward_auth``."""
