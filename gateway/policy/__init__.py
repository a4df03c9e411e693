"""The policy language of routes: Pomerium's PPL, parsed at load, compiled to functions.

Pure: no Twisted, no I/O once parsed (time zones are read when the policy is), and
nothing of the gateway imported (``problems.Problems`` names the sink it reports to). It
is the lowest tier: ``config`` compiles a route's policy with the route, so that
``gateway check`` and a reload refuse a bad one; ``gateway.authorize.decide`` decides
with it, and builds the ``Facts`` of a caller and what they ask.

- ``grammar.parse_document``: a ``policy`` value -> ``Document`` (problems at key paths)
- ``compile.Policy``: ``evaluate(facts) -> Verdict``, ``explain(facts) -> Trace``, ``reads``
- ``legacy.legacy_rules``: the allow fields as rules
- ``specialize.specialize``: a policy for one person, only its request criteria left
- ``any_message.any_message_allowed``: whether a person may send some MCP message on a
  route (how an MCP route's requests that carry none are decided)
- ``unsigned.admits_without_sign_in``: the allow rules that may let in a request without
  a session (for ``gateway check``)

Criteria about the person are unknown, not false, for someone not signed in (three-valued:
``compile``).
"""

from __future__ import annotations

from gateway.policy.compile import Policy
from gateway.policy.criteria import (
    CLIENT_CERT,
    CLIENT_IP,
    CLOCK,
    CORS,
    CRITERIA,
    METHOD,
    PATH,
    REQUEST_FACTS,
    SSH_USERNAME,
)
from gateway.policy.facts import CertFacts, Facts
from gateway.policy.grammar import parse_document
from gateway.policy.legacy import LegacyFields, legacy_ppl, legacy_rules
from gateway.policy.nodes import Document
from gateway.policy.specialize import Specialized, specialize
from gateway.policy.verdict import (
    ALLOW_MATCHED,
    DENY_MATCHED,
    KIND_TEXT,
    NO_ALLOW_MATCHED,
    Trace,
    TraceNode,
    Verdict,
)


def route_policy(document: Document | None, legacy: LegacyFields) -> Policy:
    """A route's policy: its ``policy`` rules, and each allow field as one more allow
    rule beside them (so the ``policy``'s deny rules hold for those too)."""
    rules = (document.rules if document is not None else ()) + legacy_rules(legacy)
    return Policy(Document(rules))


__all__ = [
    "ALLOW_MATCHED", "CLIENT_CERT", "CLIENT_IP", "CLOCK", "CORS", "CRITERIA", "DENY_MATCHED",
    "KIND_TEXT", "METHOD", "NO_ALLOW_MATCHED", "PATH", "REQUEST_FACTS", "SSH_USERNAME", "CertFacts",
    "Document", "Facts", "LegacyFields", "Policy", "Specialized", "Trace", "TraceNode",
    "Verdict", "legacy_ppl", "legacy_rules", "parse_document", "route_policy", "specialize",
]
