"""``identity_providers``: the OpenID Connect providers the gateway trusts, as values.

Each entry is interactive (people sign in through it: ``client_id``), a bearer issuer
(machines present its JWTs: ``bearer``), or both. Pure: the entries are parsed and
checked here with their key paths (``identity_providers[2].bearer.audiences: ...``);
the files they name (``client_secret_file``, ``ca_file``, ``jwks_file``) are read by
``validate``, which knows the configuration's directory.

The single-provider settings (``idp_provider_url``, ``idp_client_id``, ...) keep working
unchanged: they describe one implicit interactive provider whose id is ``default``
(``IMPLICIT_ID``). Why that name: sessions stored before providers had ids read as it
(``Session.provider``), so a policy or a route's ``identity_providers`` can name it; it
stays the same when the provider's URL changes (an id made from the URL would turn every
stored session into another provider's); and it says what it is, the provider of a
configuration that names none. An entry of ``identity_providers`` may not take that id
while ``idp_provider_url`` is set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from gateway.config.errors import Problems, did_you_mean
from gateway.config.values import is_loopback_host

SETTING = "identity_providers"
IMPLICIT_ID = "default"
# Kubernetes service-account tokens: issuer and keys from the API server's discovery,
# or ``jwks_file`` (the bearer helper's presets resolve it)
KUBERNETES = "kubernetes:///"
# ids are written in policies, routes, cookies, URLs (``?provider=``) and log lines
_ID = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
_FIELDS = ("id", "name", "issuer", "client_id", "client_secret", "client_secret_file",
           "scopes", "request_params", "ca_file", "jwks_file", "allow_unverified_email",
           "bearer")
_BEARER_FIELDS = ("audiences", "groups_claim", "allow_unverified_email")
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BearerRules:
    """How a bearer provider's tokens are admitted: ``aud`` must be one of
    ``audiences`` (never empty: no audience is a configuration error, not "any");
    ``groups`` come from ``groups_claim``; ``email`` counts only when verified unless
    ``allow_unverified_email``."""

    audiences: tuple[str, ...]
    groups_claim: str = "groups"
    allow_unverified_email: bool = False


@dataclass(frozen=True, slots=True)
class IdentityProvider:
    """One provider. ``interactive`` when people sign in through it (``client_id``);
    ``bearer`` when its JWTs are admitted as they are. ``name``: what the chooser page
    shows (default: the id). ``client_secret`` is the inline one; ``validate`` reads
    ``client_secret_file`` into the material. ``ca_file``: the CA bundle its HTTPS is
    verified against instead of the system store."""

    id: str
    issuer: str
    name: str = ""
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    client_secret_file: str = ""
    scopes: tuple[str, ...] = ()
    request_params: Mapping[str, str] = field(default_factory=lambda: _NO_PARAMS)
    ca_file: str = ""
    jwks_file: str = ""
    allow_unverified_email: bool = False
    bearer: BearerRules | None = None
    # the implicit provider of the idp_* settings (its secret is idp_client_secret)
    implicit: bool = False
    # its place in ``identity_providers`` (for the problems ``validate`` finds in its
    # files, named as the others are; -1: the implicit one)
    index: int = field(default=-1, compare=False)

    @property
    def interactive(self) -> bool:
        return bool(self.client_id)

    @property
    def label(self) -> str:
        """What people are shown: the name, else the id."""
        return self.name or self.id


def implicit_provider(issuer: str, client_id: str, scopes: tuple[str, ...],
                      request_params: Mapping[str, str], allow_unverified_email: bool
                      ) -> IdentityProvider | None:
    """The provider the single-provider settings describe (``None``: they describe
    none)."""
    if not issuer:
        return None
    return IdentityProvider(IMPLICIT_ID, issuer, client_id=client_id, scopes=scopes,
                            request_params=request_params,
                            allow_unverified_email=allow_unverified_email, implicit=True)


def parse_identity_providers(value: Any, problems: Problems, *,
                             default_scopes: tuple[str, ...] = ("openid", "profile", "email",
                                                                "offline_access"),
                             ) -> tuple[IdentityProvider, ...]:
    """The entries of ``identity_providers`` (problems reported at their key paths; an
    entry with problems is left out). ``default_scopes``: an interactive entry's scopes
    when it sets none (``idp_scopes``)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        problems.error(SETTING, f"must be a list of providers, got a {type(value).__name__}")
        return ()
    out: list[IdentityProvider] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(value):
        where = f"{SETTING}[{index}]"
        provider = _entry(entry, where, problems, default_scopes)
        if provider is None:
            continue
        provider = replace(provider, index=index)
        if provider.id in seen:
            problems.error(f"{where}.id", f"{provider.id!r} is already the id of "
                           f"{SETTING}[{seen[provider.id]}]; ids must be unique")
            continue
        seen[provider.id] = index
        out.append(provider)
    return tuple(out)


def _entry(entry: Any, where: str, problems: Problems,
           default_scopes: tuple[str, ...]) -> IdentityProvider | None:
    if not isinstance(entry, Mapping):
        problems.error(where, f"must be a mapping (id, issuer, ...), got "
                       f"{type(entry).__name__}")
        return None
    before = len(problems.errors)
    for key in entry:
        if key not in _FIELDS:
            problems.error(f"{where}.{key}", "unknown field" + did_you_mean(str(key), _FIELDS))
    ident = _text(entry, "id", where, problems)
    if not ident:
        problems.error(f"{where}.id", "is required")
    elif not _ID.match(ident):
        problems.error(f"{where}.id", f"{ident!r}: use 1-64 lower-case letters, digits, '-' "
                       "and '_', starting and ending with a letter or digit")
    issuer = _text(entry, "issuer", where, problems)
    _check_issuer(issuer, f"{where}.issuer", problems)
    client_id = _text(entry, "client_id", where, problems)
    secret = _text(entry, "client_secret", where, problems)
    secret_file = _text(entry, "client_secret_file", where, problems)
    if secret and secret_file:
        problems.error(f"{where}.client_secret_file",
                       "set client_secret or client_secret_file, not both")
    if client_id and not (secret or secret_file):
        problems.error(f"{where}.client_secret_file", "an interactive provider (client_id) "
                       "needs client_secret_file (or client_secret)")
    if (secret or secret_file) and not client_id:
        problems.error(f"{where}.client_id", "is required with a client secret")
    before_bearer = len(problems.errors)
    bearer = _bearer(entry.get("bearer"), f"{where}.bearer", problems)
    if not client_id and bearer is None and len(problems.errors) == before_bearer:
        problems.error(where, "is neither interactive (client_id) nor a bearer issuer "
                       "(bearer: {audiences: [...]}); say which")
    if issuer == KUBERNETES and client_id:
        problems.error(f"{where}.client_id", "a kubernetes:/// provider issues "
                       "service-account tokens only: it cannot sign people in")
    scopes = _strings(entry, "scopes", where, problems)
    if client_id and scopes is not None and "openid" not in scopes:
        problems.error(f"{where}.scopes", "must include openid")
    params = _params(entry.get("request_params"), f"{where}.request_params", problems)
    if not client_id:
        for key in ("scopes", "request_params"):
            if entry.get(key) is not None:
                problems.warn(f"{where}.{key}", "has no effect without client_id")
    name = _text(entry, "name", where, problems)
    if len(name) > 80 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        problems.error(f"{where}.name", "must be at most 80 characters without control "
                       "characters")
    unverified = entry.get("allow_unverified_email", False)
    if not isinstance(unverified, bool):
        problems.error(f"{where}.allow_unverified_email", "must be true or false")
    if len(problems.errors) > before:
        return None
    return IdentityProvider(
        # exactly as configured: a bearer token's iss and a discovery document's issuer
        # are compared with it as they are, and some issuers end in a slash (Auth0's
        # https://tenant.auth0.com/, Azure AD v1's https://sts.windows.net/{tenant}/);
        # the discovery URL is joined without it (RemoteKeys, oidc.Provider)
        id=ident, issuer=issuer,
        name=name, client_id=client_id, client_secret=secret,
        client_secret_file=secret_file,
        scopes=(scopes or default_scopes) if client_id else (),
        request_params=MappingProxyType(params), ca_file=_text(entry, "ca_file", where,
                                                                problems),
        jwks_file=_text(entry, "jwks_file", where, problems),
        allow_unverified_email=bool(unverified), bearer=bearer)


def _check_issuer(issuer: str, where: str, problems: Problems) -> None:
    """https, or http on a loopback address (a provider on this machine, and the tests):
    tokens and codes cross the network in the clear otherwise."""
    if not issuer:
        problems.error(where, "is required (the provider's issuer URL)")
        return
    if issuer == KUBERNETES:
        return
    parts = urlsplit(issuer)
    if parts.scheme == "https" and parts.hostname:
        if parts.query or parts.fragment:
            problems.error(where, f"{issuer!r}: an issuer has no query or fragment")
        return
    if parts.scheme == "http" and parts.hostname and is_loopback_host(parts.hostname):
        return
    problems.error(where, f"{issuer!r} must be an https URL (http only on a loopback "
                   f"address), or {KUBERNETES}")


def _bearer(value: Any, where: str, problems: Problems) -> BearerRules | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.error(where, "must be a mapping: {audiences: [...]}")
        return None
    for key in value:
        if key not in _BEARER_FIELDS:
            problems.error(f"{where}.{key}", "unknown field"
                           + did_you_mean(str(key), _BEARER_FIELDS))
    audiences = _strings(value, "audiences", where, problems)
    if not audiences:
        problems.error(f"{where}.audiences", "at least one audience is required: a token's "
                       "aud must name this gateway, and no audience never means any")
        return None
    claim = value.get("groups_claim", "groups")
    if not isinstance(claim, str) or not claim.strip():
        problems.error(f"{where}.groups_claim", "must be a claim name")
        return None
    unverified = value.get("allow_unverified_email", False)
    if not isinstance(unverified, bool):
        problems.error(f"{where}.allow_unverified_email", "must be true or false")
        return None
    return BearerRules(audiences, claim.strip(), unverified)


def _text(entry: Mapping[str, Any], key: str, where: str, problems: Problems) -> str:
    value = entry.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        problems.error(f"{where}.{key}", f"must be a string, got {type(value).__name__}")
        return ""
    return value.strip()


def _strings(entry: Mapping[str, Any], key: str, where: str, problems: Problems
             ) -> tuple[str, ...] | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(
            isinstance(v, str) and v.strip() for v in value):
        problems.error(f"{where}.{key}", "must be a list of non-empty strings")
        return None
    return tuple(dict.fromkeys(v.strip() for v in value))


def _params(value: Any, where: str, problems: Problems) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str | int | bool) for k, v in value.items()):
        problems.error(where, "must be a mapping of parameter name to value")
        return {}
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def accepted_by_default(providers: tuple[IdentityProvider, ...]) -> tuple[str, ...]:
    """The ids a route accepts when it names none: every interactive provider."""
    return tuple(p.id for p in providers if p.interactive)


def directory_provider(providers: tuple[IdentityProvider, ...]) -> str:
    """The provider whose people ``idp_service_account``'s directory describes: the
    implicit ``default`` (the directory is one of the idp_* settings, which describe
    it), else the first interactive entry of ``identity_providers``; ``""`` when there
    is none. Its groups, and ending sessions of users it no longer lists, apply to
    sessions of that provider only: a user id or an e-mail address means a person only
    within the provider that issued it (another provider may hand out the same ``sub``,
    or vouch for the same address)."""
    return next((p.id for p in providers if p.interactive), "")


def accepted_by(named: tuple[str, ...], providers: tuple[IdentityProvider, ...]
                ) -> tuple[str, ...]:
    """The interactive providers a route whose ``identity_providers`` is ``named``
    accepts sessions of, in configuration order (none named: every one)."""
    wanted = set(named)
    return tuple(p for p in accepted_by_default(providers) if not wanted or p in wanted)
