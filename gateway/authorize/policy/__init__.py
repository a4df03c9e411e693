"""Route policies for deciding: the policy language (``gateway.policy``, where routes
compile it at load) and the ``Facts`` a decision gives it.

    facts = facts_for(request, session_view, now, groups_available=...)
    verdict = route.policy.evaluate(facts)   # Verdict: allowed, rule, criterion, kind
    trace = route.policy.explain(facts)      # for ``gateway policy check``
    route.policy.reads                       # request facts the decision rests on

``route.policy`` holds the route's ``policy`` rules and its allow fields as allow rules
(``legacy_rules``; ``legacy_ppl`` writes them as PPL).
"""

from __future__ import annotations

from gateway.authorize.policy.certs import cert_facts
from gateway.authorize.policy.facts import (
    SSH_METHOD,
    RequestFacts,
    facts_for,
    identity_facts,
    method_text,
    person_facts,
    ssh_facts,
)
from gateway.policy import (
    ALLOW_MATCHED,
    CLIENT_CERT,
    CLIENT_IP,
    CLOCK,
    CORS,
    DENY_MATCHED,
    KIND_TEXT,
    METHOD,
    NO_ALLOW_MATCHED,
    PATH,
    REQUEST_FACTS,
    SSH_USERNAME,
    CertFacts,
    Document,
    Facts,
    Policy,
    Specialized,
    Trace,
    TraceNode,
    Verdict,
    legacy_ppl,
    legacy_rules,
    parse_document,
    route_policy,
    specialize,
)

__all__ = [
    "ALLOW_MATCHED", "CLIENT_CERT", "CLIENT_IP", "CLOCK", "CORS", "DENY_MATCHED", "KIND_TEXT",
    "METHOD", "NO_ALLOW_MATCHED", "PATH", "REQUEST_FACTS", "SSH_METHOD", "SSH_USERNAME",
    "CertFacts", "Document", "Facts", "Policy", "RequestFacts", "Specialized", "Trace",
    "TraceNode", "Verdict", "cert_facts", "facts_for", "identity_facts", "legacy_ppl",
    "legacy_rules", "method_text", "parse_document", "person_facts", "route_policy",
    "specialize", "ssh_facts",
]
