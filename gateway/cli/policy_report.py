"""What ``gateway policy check`` found, as lines for people or one JSON object: the route
(for a route without ``policy``, its allow fields as the rules they are), the request and
the person as the decision saw them, the decision and the sentence a refused person
reads, notes on what the daemon would do differently, and the trace of every rule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.authorize.caller import Caller
from gateway.authorize.email import REFUSAL_TEXT
from gateway.cli.policy_inputs import ProbeRequest
from gateway.config.providers import IMPLICIT_ID
from gateway.config.routes import Route
from gateway.observability.request_metrics import route_label
from gateway.policy import CertFacts, Trace, legacy_ppl, legacy_rules
from gateway.policy.times import instant_text

ALLOWED, DENIED = 0, 1
SIGN_IN_REQUIRED = "sign-in required"


@dataclass(frozen=True, slots=True)
class Certificate:
    """``--client-cert`` as the daemon would treat it."""

    facts: CertFacts
    used: bool  # the daemon hands it to the policy (the route has a client CA)
    problem: str | None  # why the route's CA rejects it (the daemon answers 495)


@dataclass(frozen=True, slots=True)
class Report:
    """Everything one check found; ``status`` is the command's exit status."""

    target: ProbeRequest
    route: Route
    now: float
    client_ip: str
    session: Caller | None  # who the session sign-in would make is
    claimed: str  # the e-mail given, used or not
    refusal: str  # why it is not used ("" when it is)
    groups_available: bool
    certificate: Certificate | None
    outcome: str  # "decided", "public" or "redirect"
    trace: Trace | None
    sentence: str  # what a refused person is told ("" when allowed)
    notes: tuple[str, ...]
    route_checks_certificates: bool = False  # the route has a client CA (495 before all)

    @property
    def status(self) -> int:
        """Denied also when the route's client CA refuses the certificate, or there is
        none: the daemon answers 495 before the policy is asked."""
        certificate = self.certificate
        refused = self.route_checks_certificates and (
            certificate is None or certificate.problem is not None)
        if refused or (self.trace is not None and not self.trace.verdict.allowed):
            return DENIED
        return ALLOWED


def route_text(route: Route) -> str:
    label = route_label(route)
    named = f" ({route.from_url})" if route.name else ""
    return f"policy[{route.index}] {label}{named}"


def who_text(report: Report) -> str:
    session = report.session
    if session is None:
        return "not signed in"
    parts = [f"user {session.user_id}"]
    if session.provider not in ("", IMPLICIT_ID):  # (the idp_* settings' one)
        parts.append(f"provider {session.provider}")
    if report.refusal:
        parts.append(f"e-mail {report.claimed} (not used: {REFUSAL_TEXT[report.refusal]})")
    elif session.email:
        parts.append(f"e-mail {session.email}")
    if session.groups:
        unused = "" if report.groups_available else " (not used)"
        parts.append(f"groups {', '.join(session.groups)}{unused}")
    claims = [f"{k}={','.join(v)}" for k, v in sorted(session.claims.items())
              if k not in ("sub", "email", "groups")]
    if claims:
        parts.append(f"claims {', '.join(claims)}")
    return ", ".join(parts)


def as_lines(report: Report) -> list[str]:
    route, target = report.route, report.target
    lines = [f"route: {route_text(route)}"]
    # the allow fields, beside a policy or not, are allow rules: say which
    labels = [rule.label for rule in legacy_rules(route)]
    for label, written in zip(labels, legacy_ppl(route), strict=True):
        lines.append(f"  {label} is the rule {json.dumps(written)}")
    path = f" (path {target.path})" if target.path else ""
    lines.append(f"request: {target.method.decode('latin-1')} {target.url}{path} from "
                 f"{report.client_ip or 'an unknown address'} at {instant_text(report.now)}")
    lines.append(f"who: {who_text(report)}")
    cert = report.certificate
    if cert is not None:
        lines.append(f"client certificate: sha256 {cert.facts.fingerprint}")
    lines.extend(decision_lines(report))
    lines.extend(f"note: {note}" for note in report.notes)
    if report.trace is not None:
        lines.append("trace:")
        for node in report.trace.rules:
            lines.extend(node.lines(1))
    return lines


def decision_lines(report: Report) -> list[str]:
    if report.outcome == "public":
        return ["decision: public: no decision (allow_public_unauthenticated_access: anyone "
                "passes, signed in or not)"]
    if report.outcome == "redirect" or report.trace is None:
        return ["decision: redirect: no decision (the route answers with its redirect "
                "before any authorization)"]
    verdict = report.trace.verdict
    if verdict.allowed:
        return [f"decision: allowed by {verdict} ({verdict.code})"]
    return [f"decision: denied by {verdict} ({verdict.code})",
            f"the person sees: {report.sentence}"]


def as_json(report: Report) -> dict[str, Any]:
    route, target, session, cert = (report.route, report.target, report.session,
                                    report.certificate)
    decision: dict[str, Any] = {"public": report.outcome == "public",
                                "redirect": report.outcome == "redirect"}
    trace = report.trace
    if trace is not None:
        v = trace.verdict
        decision.update(allowed=v.allowed, rule=v.rule, criterion=v.criterion,
                        outcome=v.outcome, kind=v.kind, code=v.code, text=str(v),
                        sign_in_required=report.sentence == SIGN_IN_REQUIRED,
                        message=report.sentence)
    else:
        decision["allowed"] = True
    identity: dict[str, Any] = {"signed_in": session is not None}
    if session is not None:
        identity.update(
            provider=session.provider, user_id=session.user_id, email=report.claimed,
            email_used=not report.refusal and bool(session.email),
            email_refused=report.refusal,
            groups=list(session.groups), groups_used=report.groups_available,
            claims={k: list(v) for k, v in sorted(session.claims.items())})
    return {
        "url": target.url,
        "route": {"index": route.index, "from": route.from_url, "name": route.name,
                  "label": route_label(route), "tcp": route.tcp,
                  "public": route.allow_public_unauthenticated_access,
                  "policy": route.policy_document is not None,
                  "allow_fields": legacy_ppl(route)},
        "request": {"method": target.method.decode("latin-1"), "host": target.host,
                    "path": target.path, "query": target.query.decode("latin-1"),
                    "client_ip": report.client_ip, "at": instant_text(report.now)},
        "identity": identity,
        "client_certificate": None if cert is None else {
            "fingerprint": cert.facts.fingerprint, "spki_hash": cert.facts.spki_hash,
            "san_email": list(cert.facts.san_email), "san_dns": list(cert.facts.san_dns),
            "san_uri": list(cert.facts.san_uri), "used": cert.used,
            "verified": cert.used and cert.problem is None, "problem": cert.problem},
        "decision": decision,
        "trace": trace.as_json() if trace is not None else None,
        "notes": list(report.notes),
    }
