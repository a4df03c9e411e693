"""What a policy decided, and why: a ``Verdict`` for every request, a ``Trace`` on demand.

A verdict names the rule path and the criterion that decided
(``allow[0].or[1] groups has engineering: matched``, ``deny[0].or[1] source_ip:
matched``) for the log, and a ``kind`` of condition for the person refused (``KIND_TEXT``:
words, never the policy's values). Verdicts of matching rules are made when the policy
is compiled and returned as they are, so an allowed request allocates none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ``Verdict.code``: stable reason codes.
ALLOW_MATCHED = "policy-allow-matched"
DENY_MATCHED = "policy-deny-matched"
NO_ALLOW_MATCHED = "policy-no-allow-matched"
# someone not signed in, where a rule's outcome depends on who they are: sign in first
NOT_SIGNED_IN = "policy-unknown-not-signed-in"

# ``TraceNode.state``
HIT, MISS, NOT_EVALUATED = "hit", "miss", "not evaluated"
# a criterion about the person (or an operator over one) for someone not signed in; also
# ``Verdict.outcome`` of the rule that made a decision wait for sign-in
UNKNOWN = "unknown: not signed in"

KIND_TEXT = {
    "closed": "this route is closed",
    "user": "your account is not allowed on this route",
    "domain": "your e-mail domain is not allowed on this route",
    "group": "your group is not allowed on this route",
    "claim": "your account's attributes do not allow you on this route",
    "provider": "the way you signed in is not accepted on this route",
    "method": "this kind of request is not allowed on this route",
    "path": "this page is not allowed for you",
    "network": "your network is not allowed on this route",
    "certificate": "your client certificate is not allowed on this route",
    "outside-dates": "this route is not open at this date",
    "outside-days": "this route is closed on this day of the week",
    "outside-hours": "this route is closed at this time of day",
    "ssh-user": "this login name is not allowed for you",
    "mcp": "this MCP request is not allowed for you on this route",
    "policy": "this route's policy does not allow you in",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """``allowed``; ``rule``: the path of the node that decided (``allow[0].or[1]``,
    ``allowed_users``, ``allow`` when no allow rule matched among several);
    ``criterion``: its description (``""`` for an operator); ``outcome``: ``matched``,
    ``not matched``, ...; ``kind``: a ``KIND_TEXT`` key; ``code``: a stable reason code.
    ``reason``: the code and the rest, as the log reads them, made once (a policy that
    reads the request decides, and names its reason, on every request)."""

    allowed: bool
    rule: str
    criterion: str
    outcome: str
    kind: str
    code: str
    reason: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", f"{self.code} {self}")

    def __str__(self) -> str:
        if self.criterion:
            return f"{self.rule} {self.criterion}: {self.outcome}"
        return f"{self.rule}: {self.outcome}"

    @property
    def text(self) -> str:
        """The refusal in words for the person (``""`` when allowed)."""
        return "" if self.allowed else KIND_TEXT.get(self.kind, KIND_TEXT["policy"])


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One rule, operator or criterion as evaluated: ``state`` is ``hit`` (it matched),
    ``miss``, ``unknown: not signed in`` (it asks about the person, and nobody is signed
    in) or ``not evaluated`` (an earlier entry already settled its operator)."""

    path: str
    text: str
    state: str
    children: tuple[TraceNode, ...] = ()

    def lines(self, depth: int = 0) -> list[str]:
        label = f"{self.path} {self.text}" if self.text else self.path
        out = [f"{'  ' * depth}{label}: {self.state}"]
        for child in self.children:
            out.extend(child.lines(depth + 1))
        return out

    def as_json(self) -> dict[str, Any]:
        node: dict[str, Any] = {"path": self.path, "state": self.state}
        if self.text:
            node["criterion"] = self.text
        if self.children:
            node["children"] = [child.as_json() for child in self.children]
        return node


@dataclass(frozen=True, slots=True)
class Trace:
    """The verdict and every rule's evaluation, in the policy's order."""

    verdict: Verdict
    rules: tuple[TraceNode, ...]

    def lines(self) -> list[str]:
        out = [f"{'allowed' if self.verdict.allowed else 'denied'}: {self.verdict}"]
        for rule in self.rules:
            out.extend(rule.lines(1))
        return out

    def as_json(self) -> dict[str, Any]:
        v = self.verdict
        return {"allowed": v.allowed, "rule": v.rule, "criterion": v.criterion,
                "outcome": v.outcome, "kind": v.kind, "code": v.code,
                "rules": [rule.as_json() for rule in self.rules]}
