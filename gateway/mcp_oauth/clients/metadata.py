"""Client metadata (RFC 7591's names) as a metadata document or a registration gives
it, checked field by field. Plain functions over decoded JSON; each returns a value and
raises ``MetadataProblem`` naming the field and what is wrong.

Only public clients: the gateway's token endpoint authenticates no client (PKCE binds a
code to whoever started the flow). A metadata document cannot hold a secret at all (the
CIMD draft forbids secret-based methods and ``client_secret``), and ``private_key_jwt``
is refused rather than silently treated as public: a client that expects its key to
matter must not be told it does. Registrations are made public (see ``registration``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from gateway.mcp_oauth.clients.redirect_uris import listing_problem
from gateway.wire.json_members import DuplicateMember, unique_members

MAX_REDIRECT_URIS = 20
MAX_NAME = 200
SECRET_METHODS = frozenset({"client_secret_basic", "client_secret_post", "client_secret_jwt"})
GRANT_TYPES = frozenset({"authorization_code", "refresh_token"})


class MetadataProblem(ValueError):
    """``field`` is wrong; ``redirect`` when it is a redirect URI (RFC 7591's
    ``invalid_redirect_uri`` rather than ``invalid_client_metadata``)."""

    def __init__(self, field: str, message: str, redirect: bool = False) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.redirect = redirect


def strict_json(body: bytes) -> Any:
    """JSON from UTF-8 ``body``; duplicate member names refused (two readers of one
    document must not see two different clients). ValueError says why not."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8: {exc}") from None
    try:
        return json.loads(text, object_pairs_hook=unique_members)
    except DuplicateMember as exc:
        raise ValueError(f"the member {exc.name!r} appears twice") from None
    except RecursionError:
        raise ValueError("is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not JSON: {exc}") from None


def redirect_uris(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    value = metadata.get("redirect_uris")
    if not isinstance(value, list) or not value:
        raise MetadataProblem("redirect_uris", "is required: a non-empty list of URIs", True)
    if len(value) > MAX_REDIRECT_URIS:
        raise MetadataProblem("redirect_uris", f"lists more than {MAX_REDIRECT_URIS} URIs",
                              True)
    for uri in value:
        problem = listing_problem(uri)
        if problem is not None:
            raise MetadataProblem("redirect_uris", f"entry {str(uri)[:100]!r} {problem}", True)
    return tuple(dict.fromkeys(value))


def display_text(metadata: Mapping[str, Any], field: str, required: bool) -> str:
    """A name shown to people: bounded, no control characters (nothing that could
    break a page or a log line)."""
    value = metadata.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise MetadataProblem(field, "is required: a non-empty string" if required
                              else "must be a non-empty string")
    if len(value) > MAX_NAME:
        raise MetadataProblem(field, f"is longer than {MAX_NAME} characters")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in value):
        raise MetadataProblem(field, "holds control characters")
    return value.strip()


def https_uri(metadata: Mapping[str, Any], field: str) -> str:
    """An optional https URL shown or linked on the consent page (``client_uri``,
    ``logo_uri``): anything else could be a ``javascript:`` link."""
    value = metadata.get(field)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 2000:
        raise MetadataProblem(field, "must be an https URL")
    try:
        parts = urlsplit(value)
    except ValueError:
        raise MetadataProblem(field, "must be an https URL") from None
    if (parts.scheme != "https" or not parts.hostname or "@" in parts.netloc
            or any(ord(c) <= 0x20 or ord(c) >= 0x7F or c == "\\" for c in value)):
        raise MetadataProblem(field, "must be an https URL with a host and no user "
                              "information")
    return value


def string_list(metadata: Mapping[str, Any], field: str) -> tuple[str, ...] | None:
    value = metadata.get(field)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MetadataProblem(field, "must be a list of strings")
    return tuple(value)


def grant_and_response_types(metadata: Mapping[str, Any]) -> None:
    """``grant_types`` (when given) within authorization_code and refresh_token and
    holding authorization_code; ``response_types`` (when given) exactly ``code``: the
    only flow the gateway serves."""
    grants = string_list(metadata, "grant_types")
    if grants is not None:
        unknown = sorted(set(grants) - GRANT_TYPES)
        if unknown:
            raise MetadataProblem("grant_types", f"lists {', '.join(unknown)}; the gateway "
                                  "serves authorization_code and refresh_token only")
        if "authorization_code" not in grants:
            raise MetadataProblem("grant_types", "must include authorization_code")
    responses = string_list(metadata, "response_types")
    if responses is not None and set(responses) != {"code"}:
        raise MetadataProblem("response_types", "must be [\"code\"] (the only response "
                              "type the gateway serves)")


def public_auth_method(metadata: Mapping[str, Any]) -> None:
    """A metadata document's ``token_endpoint_auth_method``: ``none`` (or absent)."""
    method = metadata.get("token_endpoint_auth_method", "none")
    if method == "none":
        pass
    elif method in SECRET_METHODS:
        raise MetadataProblem("token_endpoint_auth_method",
                              f"is {method}: a metadata document cannot establish a shared "
                              "secret (use none)")
    else:
        raise MetadataProblem("token_endpoint_auth_method",
                              f"is {str(method)[:40]!r}: the gateway serves public clients "
                              "only (none)")
    for field in ("client_secret", "client_secret_expires_at"):
        if field in metadata:
            raise MetadataProblem(field, "must not be in a metadata document")
