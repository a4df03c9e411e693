"""Bearer JWTs from outside issuers (CI jobs, Kubernetes workloads, agents holding an
access token from the company's IdP): ``Authorization: Bearer <JWT>`` verified against
one provider's keys, with nothing stored per token beyond a bounded cache.

- ``expect``: what one provider's tokens must say (``BearerExpectations``, a value);
- ``jws``: strict compact JWS parsing (segments, base64url, JSON objects without
  duplicate names) and the header rules;
- ``keys``: a provider's ``KeySet`` read from a JWKS document, each key with the
  algorithms its type allows;
- ``verify``: the pure ``verify`` (``Verified`` or ``Refused`` naming the check) and
  ``explain`` (every check, for ``gateway policy check --token``);
- ``verifier``: ``Verifier``, a provider's ``verify`` behind a bounded cache, asking its
  key source again on an unknown ``kid``; ``check_any`` for a route accepting several
  providers (chosen by the issuer the token names, each checking with its own keys);
- ``header``: the request's ``Authorization: Bearer`` JWT (not the gateway's own
  ``Bearer Gateway-`` token);
- ``source``: where a provider's keys come from (discovery over HTTPS, a ``jwks_url``,
  a ``jwks_file`` reloaded on change), keeping the last good keys, over a fetch it is
  given (``gateway.services.bearer_keys``: the HTTPS, the service running the sources);
- ``presets``: ``kubernetes:///`` and GitHub Actions.

Not to be confused with ``gateway.sessions.bearer``: the gateway's own programmatic
token (``Authorization: Gateway``).
"""
