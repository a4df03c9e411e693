"""Authorization: one pure decision, who is asking, and an entrance per kind of caller.

- ``decide``: ``decide(policy, caller, asked) -> Verdict`` (no I/O, no cache) and the one
  place a caller and what they ask become the policy's ``Facts`` (``facts_of``);
  ``http_asked`` and ``ssh_asked`` say what a request or a login asks.
- ``caller``: ``Caller``, who is asking (a session's person, or one with no session), and
  ``caller_of``, the one place a session becomes one.
- ``http_requests``: the HTTP entrance (``Decider.authorize``, for the proxy and forward
  auth), with the caches around the decision.
- ``ssh_logins``: the SSH entrance (``AuthorizeSsh``), the only thing of authorization
  the SSH service holds.
- ``hook``: the data plane's side (``RequestInfo``, ``Allow``/``Reply``, ``Authorizer``,
  ``SignInApp``); ``answers``: error pages and the refusal's sentence; ``assertion``:
  the signed identity passed upstream and claim headers; ``allow_fields``: the allow
  fields' reason codes; ``email``, ``claims``, ``certificates``: what providers and
  client certificates say, made fit for decisions.
"""
