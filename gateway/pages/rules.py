"""What a 403 page may say about the rule that would have let the person in.

Safe to show (documented in the README, "Pages"): the *kinds* of rule a route has, and
the e-mail domains it admits (a person needs to know which account to use). Never shown:
the names or ids of allowed users (other people), group names or ids, and claim values
(directory structure and identity-provider data that a signed-in stranger should not
learn); those are described by kind and count only.
"""

from __future__ import annotations

from gateway.config.routes import Route


def _count(n: int, one: str, many: str) -> str:
    return one if n == 1 else many.format(n=n)


def admits(route: Route, groups_available: bool = True) -> tuple[str, ...]:
    """One short sentence per rule kind of ``route``, in general terms."""
    out: list[str] = []
    if route.allow_any_authenticated_user:
        out.append("Anyone who signs in.")
    if route.allowed_users:
        out.append(_count(len(route.allowed_users), "One person named by the administrator.",
                          "{n} people named by the administrator."))
    if route.allowed_domains:
        domains = ", ".join(sorted({d.lower() for d in route.allowed_domains}))
        out.append(f"People whose e-mail address is in: {domains}.")
    if route.allowed_groups:
        text = _count(len(route.allowed_groups), "Members of a group the administrator chose.",
                      "Members of any of {n} groups the administrator chose.")
        if not groups_available:
            text += " (Group rules are not in effect: the gateway has no group data.)"
        out.append(text)
    if route.allowed_idp_claims:
        out.append("People whose identity-provider account has certain attributes.")
    if route.policy_document is not None:
        # its rules are not described: their values (names, networks, hours) are the
        # administrator's, and the refusal above already says what kind of rule refused
        out.append("People the route's policy lets in (an administrator can tell you what "
                   "it needs).")
    if not out:
        out.append("Nobody yet: the administrator has not given this route any allow rule.")
    return tuple(out)
