"""``gateway policy check``: the route that serves a URL, what its policy decides for
someone at some instant, and the evaluation of every rule (hit, miss, not evaluated).

Nothing here decides: the route is found as the data plane finds it (``Plan.lookup`` on
the normalised path, ``Plan.lookup_tcp`` for ``tcp+https``), the person is the caller
the session sign-in would build is (``caller_of``), and the verdict and trace are the
route's compiled policy (``route.policy.explain``) on ``facts_of``'s facts: the daemon's
own evaluator, so the two never disagree.

Exit status: 0 allowed (or no decision: a public or redirect route), 1 denied, 2 no route,
a bad configuration or a bad argument.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import time
from dataclasses import replace
from functools import partial
from typing import Any, TextIO

from cryptography import x509

from gateway.authorize.allow_fields import refused_codes
from gateway.authorize.answers import denial_message
from gateway.authorize.caller import Caller, caller_of
from gateway.authorize.certificates import cert_facts
from gateway.authorize.decide import decide_message, facts_of, http_asked, mcp_asked
from gateway.authorize.hook import RequestInfo
from gateway.cli.policy_inputs import (
    InputError,
    ProbeRequest,
    build_session,
    der,
    parse_claims,
    parse_groups,
    parse_instant,
    parse_target,
    read_chain,
)
from gateway.cli.policy_report import SIGN_IN_REQUIRED, Certificate, Report, as_json, as_lines
from gateway.cli.policy_token import TokenCheck, check_token, token_json, token_lines
from gateway.config import ConfigErrors, Snapshot, load_snapshot
from gateway.config.providers import IMPLICIT_ID, IdentityProvider
from gateway.config.routes import Route
from gateway.dataplane.routing.plan import RoutePlan, build_plan
from gateway.dataplane.routing.router import own_path
from gateway.mcp.errors import denied_message
from gateway.mcp.messages import McpCall, McpVerdict
from gateway.policy import CLIENT_IP, Trace, Verdict
from gateway.policy.any_message import any_message_allowed
from gateway.policy.facts import is_session_keeping

NOT_CHECKED = 2  # no route, a bad configuration or argument


class NotRouted(Exception):
    """No route decides this URL; the message says what the gateway does instead."""


def run_policy_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not os.path.exists(args.config):
        err.write(f"gateway policy check: {args.config}: no such file\n")
        return NOT_CHECKED
    try:
        snapshot = load_snapshot(args.config)
    except ConfigErrors as exc:
        err.write(exc.render() + "\n")
        for warning in exc.warnings:
            err.write(f"warning: {warning}\n")
        return NOT_CHECKED
    try:
        token = check_token(args, snapshot)
        report = check(snapshot, args, token)
    except (InputError, NotRouted) as exc:
        err.write(f"gateway policy check: {exc}\n")
        return NOT_CHECKED
    if args.json:
        document = as_json(report)
        if token is not None:
            document["token"] = token_json(token)
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        lines = token_lines(token) if token is not None else []
        out.write("\n".join(lines + as_lines(report)) + "\n")
    return report.status


def check(snapshot: Snapshot, args: argparse.Namespace, token: TokenCheck | None = None
          ) -> Report:
    """The report for these arguments (``InputError``, ``NotRouted``); with ``token``
    (``--token``), the person is the one its verified claims make, or nobody."""
    mcp = _mcp_call(args)
    method = args.method or ("POST" if mcp is not None else None)
    target = parse_target(args.url, method,
                          snapshot.options.path_with_parameters_action == "reject")
    now = token.now if token is not None else \
        float(int(time.time())) if args.at is None else parse_instant(args.at)
    groups = parse_groups(args.groups)
    claims = parse_claims(args.claim)
    chain = read_chain(args.client_cert) if args.client_cert else None
    plan = route_plan(snapshot, target)
    route = plan.route
    notes: list[str] = []
    if token is not None:
        caller = token.caller()  # its provider's e-mail rule applied (``Verified``)
        refusal = ""
        if caller is None:
            notes.append("the token is refused: the gateway answers 401 before any "
                         "decision; decided as for someone not signed in")
    else:
        caller = _person(snapshot, args, groups, claims, now, notes)
        refusal = caller.email_refusal if caller is not None else ""
    # a token's groups are its provider's groups claim; a person's need the directory
    groups_available = caller.groups_available if token is not None and caller is not None \
        else bool(snapshot.options.idp_service_account)
    if groups and caller is not None and not groups_available:
        notes.append("groups are not used: idp_service_account is not configured, so the "
                     "gateway has no group data and no groups criterion matches")
    if not args.ip:
        if CLIENT_IP in route.policy.reads:
            notes.append("no --ip: the client address is unknown and matches no source_ip")
    elif not _is_address(args.ip):
        notes.append(f"--ip {args.ip} is not an IP address: it matches no source_ip")
    certificate = _certificate(plan, chain, notes)
    found = partial(Report, target, route, now, args.ip, caller, args.email or "", refusal,
                    groups_available, certificate,
                    route_checks_certificates=plan.client_cert is not None)
    if route.redirect is not None:  # answered before authorization, as public routes are
        return found("redirect", None, "", tuple(notes))
    if plan.public:
        return found("public", None, "", tuple(notes))
    request = RequestInfo(target.method, target.scheme, target.host, target.path,
                          target.query, [(b"host", target.host.encode("latin-1"))], args.ip)
    used = certificate.facts if certificate is not None and certificate.used else None
    asked = http_asked(request, now, client_cert=used)
    if mcp is not None and route.mcp is None:
        notes.append("--mcp-method/--mcp-name are not used: the route has no mcp, so its "
                     "requests carry no MCP message and the MCP criteria are false")
    elif mcp is not None:
        asked = mcp_asked(asked, mcp)
        if is_session_keeping(mcp.method) and caller is not None:
            admitted = any_message_allowed(route.policy, facts_of(caller, asked)).allowed
            notes.append(f"{mcp.method or 'a request without a message'} only keeps the "
                         "session: the gateway allows it when the person may send some "
                         f"message on the route ({'yes' if admitted else 'no'}), whatever "
                         "the rules below say of it as written")
    elif route.mcp is not None:
        notes.append("an MCP route: decided as a request without an MCP message (the MCP "
                     "criteria false); --mcp-method/--mcp-name ask about one")
    trace = route.policy.explain(facts_of(caller, asked))
    if asked.mcp is not None:
        # the daemon's verdict on the message (one that only keeps the session is the
        # person's: the note above), beside the rules as written
        trace = Trace(decide_message(route.policy, caller, asked), trace.rules)
    sentence = "" if trace.verdict.allowed else refusal_sentence(
        route, trace.verdict, caller, now, groups_available)
    if sentence and sentence != SIGN_IN_REQUIRED and asked.mcp is not None:
        # a refused MCP message is answered as a JSON-RPC error, not the 403 page
        sentence = (f"a JSON-RPC error: "
                    f"{denied_message(McpVerdict(asked.mcp, False))}")
    return found("decided", trace, sentence, tuple(notes))


def _mcp_call(args: argparse.Namespace) -> McpCall | None:
    """The JSON-RPC message ``--mcp-method``/``--mcp-name`` ask about (``None``: none)."""
    method = getattr(args, "mcp_method", None)
    name = getattr(args, "mcp_name", None)
    if method is None and name is None:
        return None
    return McpCall(1, method or "tools/call", name or "")


def _person(snapshot: Snapshot, args: argparse.Namespace, groups: list[str] | None,
            claims: dict[str, Any], now: float, notes: list[str]) -> Caller | None:
    """Who the session sign-in would make is, as decisions see them (``caller_of``: no
    e-mail the provider did not vouch for; ``Caller.email_refusal`` says why)."""
    o = snapshot.options
    session = build_session(args.user, args.email, groups, claims, now, o.cookie_expire)
    if session is None:
        if groups is not None or claims:
            notes.append("--groups and --claim describe someone signed in: give --user or "
                         "--email too (without them nobody is signed in)")
        return None
    if not args.user:
        notes.append(f"no --user: criteria on the user id see the placeholder "
                     f"{session.user_id!r}")
    session = replace(session, provider=_provider(o.identity_providers, args.provider, notes))
    return caller_of(session, allow_unverified_email=o.idp_allow_unverified_email,
                     groups_available=bool(o.idp_service_account))


def _provider(providers: tuple[IdentityProvider, ...], given: str | None,
              notes: list[str]) -> str:
    """``--provider``, or the first interactive provider (the one the chooser lists
    first); an id the configuration does not know is taken as given, with a note."""
    if given:
        if given not in {p.id for p in providers}:
            notes.append(f"--provider {given}: no identity provider of the configuration "
                         "has this id")
        return given
    interactive = [p.id for p in providers if p.interactive]
    return interactive[0] if interactive else IMPLICIT_ID


def route_plan(snapshot: Snapshot, target: ProbeRequest) -> RoutePlan:
    """The route the data plane gives this request to (``Exchange.begin``'s order), or
    ``NotRouted`` saying what answers instead."""
    plan = build_plan(snapshot)
    if target.tcp:
        found, known = plan.lookup_tcp(target.host)
        if found is None:
            raise NotRouted(f"no route serves {target.url}: {target.host} is "
                            + ("not a TCP route; CONNECT is only for tcp+https routes"
                               if known else "no tcp+https route's host:port"))
        return found
    path = target.path
    if path in ("/ping", "/healthz"):
        raise NotRouted(f"{target.url}: the gateway answers {path} itself (health check), "
                        "on every host: no route decides it")
    if own_path(path):
        raise NotRouted(f"{target.url}: /.gateway/ is the gateway's own (sign-in, who am I, "
                        "sign-out): no route decides it")
    if plan.is_forward_auth(target.host):
        raise NotRouted(f"{target.url}: {target.host} is the forward-auth endpoint "
                        "(forward_auth_url): check the URL it is asked about instead")
    found, known = plan.lookup(target.host, path)
    if path == "/robots.txt" and (found is None or not found.public):
        raise NotRouted(f"{target.url}: the gateway answers /robots.txt itself (disallow "
                        "all) where no public route serves it")
    if found is None:
        raise NotRouted(f"no route serves {target.url}: " + (
            f"the routes of {target.host} match no path {path}" if known
            else f"no route has the host {target.host}"))
    if found.tcp:
        raise NotRouted(f"{target.url}: {target.host} is a TCP route, reached with CONNECT "
                        f"only: check --url {found.route.from_url}")
    return found


def _certificate(plan: RoutePlan, chain: list[x509.Certificate] | None,
                 notes: list[str]) -> Certificate | None:
    """The certificate as the daemon treats it: used by the policy only when the route
    has a client CA (``tls_downstream_client_ca``, else ``client_ca``) that verifies it;
    any other is refused with 495 before a decision, or never asked for."""
    if chain is None:
        if plan.client_cert is not None:
            notes.append("this route requires a client certificate verified against its CA:"
                         " without one the daemon answers 495 before any decision")
        return None
    facts = cert_facts(der(chain[0]))
    if plan.client_cert is None:
        notes.append("the client certificate is not considered: this route has no client "
                      "CA (tls_downstream_client_ca or client_ca), and the daemon uses only "
                      "a certificate the route verifies; decided without one")
        return Certificate(facts, False, None)
    problem = plan.client_cert.check(chain)
    if problem is None:
        notes.append("the client certificate is verified against the route's client CA: "
                     "the daemon uses it")
    else:
        notes.append(f"the route's client CA refuses the client certificate ({problem}): "
                     "the daemon answers 495 before any decision; decided as if it had "
                     "been accepted")
    return Certificate(facts, True, problem)


def refusal_sentence(route: Route, verdict: Verdict, caller: Caller | None, now: float,
                     groups_available: bool) -> str:
    """What the refused person is told: sign in, or ``Decider._denied``'s sentence (a
    route without ``policy`` is refused in its allow fields' codes, which pick the
    words)."""
    if caller is None or not caller.signed_in(now):
        return SIGN_IN_REQUIRED
    refusal, claimed = caller.email_refusal, caller.claimed_email
    if route.policy_document is not None:
        return denial_message(caller.who, (verdict.reason,), refusal, claimed, verdict)
    return denial_message(caller.who, refused_codes(route, groups_available, refusal),
                          refusal, claimed)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
