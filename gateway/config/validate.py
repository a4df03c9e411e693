"""Cross-setting rules, derived defaults, and loading of the TLS material and secrets.

Runs after every value has its type. Messages the original product spelled out are kept
(``config: server must be run with ...``), each prefixed by the key path it concerns.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from gateway.config.errors import Problems
from gateway.config.kvstore_dsn import BadConnectionString, parse_dsn
from gateway.config.material import Pem, Reader, key_matches_certificate, load_key, load_material
from gateway.config.providers import IMPLICIT_ID, SETTING, implicit_provider
from gateway.config.routes import Route
from gateway.config.settings import Options, default_autocert_dir
from gateway.config.validate_mcp import mcp_clients, mcp_resources_distinct
from gateway.config.validate_observability import observability
from gateway.config.values import decode_secret
from gateway.policy.nodes import criteria_of

_EPHEMERAL: dict[str, bytes] = {}


@dataclass(frozen=True)
class Material:
    """Loaded secrets and PEM material the services use (never logged)."""

    shared_secret: bytes = b""
    cookie_secret: bytes = b""
    idp_client_secret: str = ""
    # ``identity_providers``: each interactive provider's client secret and, where it
    # names one, the CA bundle its HTTPS is verified against (by id)
    provider_secrets: Mapping[str, str] = field(default_factory=dict)
    provider_cas: Mapping[str, bytes] = field(default_factory=dict)
    signing_key: bytes | None = None
    certificates: tuple[tuple[bytes, bytes], ...] = ()
    client_ca: bytes | None = None
    client_crl: bytes | None = None
    certificate_authority: bytes | None = None
    metrics_certificate: tuple[bytes, bytes] | None = None
    metrics_client_ca: bytes | None = None
    metrics_basic_auth: tuple[str, str] | None = None
    autocert_trusted_ca: bytes | None = None
    storage_client_certificate: tuple[bytes, bytes] | None = None
    storage_ca: bytes | None = None
    mcp_client_id_metadata_ca: bytes | None = None
    generated: tuple[str, ...] = field(default=())


def ephemeral_secret(name: str) -> bytes:
    """A random key kept for the life of the process, so reloads keep sessions valid."""
    if name not in _EPHEMERAL:
        _EPHEMERAL[name] = os.urandom(32)
    return _EPHEMERAL[name]


def derive(options: Options) -> Options:
    """Fill the defaults that depend on other settings (all-in-one mode and friends)."""
    aio = options.all_in_one
    changes: dict[str, Any] = {}
    if not options.address:
        changes["address"] = ":443"
    if not options.autocert_dir:
        changes["autocert_dir"] = default_autocert_dir()
    if not options.grpc_address:
        changes["grpc_address"] = ":5443" if aio else ":443"
    if options.grpc_insecure is None:
        changes["grpc_insecure"] = aio
    if not options.codec_type:
        changes["codec_type"] = "http1" if aio else "auto"
    if not options.proxy_log_level:
        changes["proxy_log_level"] = options.log_level
    implicit = implicit_provider(options.idp_provider_url, options.idp_client_id,
                                 options.idp_scopes, options.idp_request_params,
                                 options.idp_allow_unverified_email)
    if implicit is not None and all(p.id != IMPLICIT_ID for p in options.identity_providers):
        # the single-provider settings: one implicit provider, first (``validate``
        # refuses an entry that takes its id)
        changes["identity_providers"] = (implicit, *options.identity_providers)
    urls = tuple(u for u in (options.authorize_service_url, *options.authorize_service_urls) if u)
    changes["authorize_service_urls"] = urls or (("http://localhost:5443",) if aio else ())
    urls = tuple(
        u for u in (options.databroker_service_url, *options.databroker_service_urls) if u
    )
    changes["databroker_service_urls"] = urls or (("http://localhost:5443",) if aio else ())
    return dataclasses.replace(options, **changes)


def needs_identity(options: Options, routes: tuple[Route, ...]) -> bool:
    """Whether sign-in settings are required: split services always; all-in-one only when
    some route is not public (a public-only gateway needs no identity provider)."""
    if options.services in ("authenticate", "authorize", "proxy"):
        return True
    if options.services != "all":
        return False
    return bool(options.forward_auth_url) or any(
        not r.allow_public_unauthenticated_access for r in routes
    )


def validate(
    options: Options, routes: tuple[Route, ...], reader: Reader, problems: Problems
) -> Material:
    """Apply every cross-setting rule; returns the loaded material."""
    material: dict[str, Any] = {}
    generated: list[str] = []
    _transport(options, reader, problems, material)
    _storage(options, reader, problems, material)
    _secrets(options, reader, problems, material, generated)
    _identity(options, routes, reader, problems, material)
    observability(options, reader, problems, material)
    mcp_clients(options, reader, problems, material)
    mcp_resources_distinct(routes, problems)
    _branding(options, problems)
    _ssh_bounds(options, problems)
    _routes_against_globals(options, routes, problems)
    _workers(options, routes, problems, material)
    _split(options, problems, material)
    return Material(generated=tuple(generated), **material)


def _transport(options: Options, reader: Reader, problems: Problems,
               material: dict[str, Any]) -> None:
    pairs: list[tuple[bytes, bytes]] = []
    for index, pair in enumerate(options.certificates):
        cert = load_material(reader, problems, inline_key="", inline="",
                             file_key=f"certificates[{index}].cert", file=pair.cert,
                             kind=Pem.CERTS)
        key = load_material(reader, problems, inline_key="", inline="",
                            file_key=f"certificates[{index}].key", file=pair.key, kind=Pem.KEY)
        if cert and key:
            if key_matches_certificate(cert, key):
                pairs.append((cert, key))
            else:
                problems.error(f"certificates[{index}]", "the key does not match the certificate")
    for cert_key, key_key in (("certificate", "certificate_key"),
                              ("certificate_file", "certificate_key_file")):
        cert_val, key_val = getattr(options, cert_key), getattr(options, key_key)
        if bool(cert_val) != bool(key_val):
            problems.error(key_key if cert_val else cert_key,
                           f"`{cert_key}` and `{key_key}` must be set together")
            continue
        if not cert_val:
            continue
        inline = not cert_key.endswith("_file")
        cert = load_material(reader, problems, inline_key=cert_key, inline=cert_val if inline
                             else "", file_key=cert_key, file="" if inline else cert_val,
                             kind=Pem.CERTS)
        key = load_material(reader, problems, inline_key=key_key, inline=key_val if inline
                            else "", file_key=key_key, file="" if inline else key_val,
                            kind=Pem.KEY)
        if cert and key:
            if key_matches_certificate(cert, key):
                pairs.append((cert, key))
            else:
                problems.error(key_key, f"the key does not match `{cert_key}`")
    material["certificates"] = tuple(pairs)
    has_certs = bool(options.certificates or options.certificate or options.certificate_file)
    if not (has_certs or options.insecure_server or options.autocert):
        problems.error(
            "insecure_server",
            "config: server must be run with `autocert`, `insecure_server` or manually provided "
            "certificates to start",
        )
    material["client_ca"] = load_material(
        reader, problems, inline_key="client_ca", inline=options.client_ca,
        file_key="client_ca_file", file=options.client_ca_file, kind=Pem.CERTS)
    material["client_crl"] = load_material(
        reader, problems, inline_key="client_crl", inline=options.client_crl,
        file_key="client_crl_file", file=options.client_crl_file, kind=Pem.CRL)
    material["certificate_authority"] = load_material(
        reader, problems, inline_key="certificate_authority",
        inline=options.certificate_authority, file_key="certificate_authority_file",
        file=options.certificate_authority_file, kind=Pem.CERTS)
    material["autocert_trusted_ca"] = load_material(
        reader, problems, inline_key="autocert_trusted_ca", inline=options.autocert_trusted_ca,
        file_key="autocert_trusted_ca_file", file=options.autocert_trusted_ca_file,
        kind=Pem.CERTS)
    if options.autocert_ca and not options.autocert:
        problems.warn("autocert_ca", "has no effect unless autocert is true")


def _storage(options: Options, reader: Reader, problems: Problems,
             material: dict[str, Any]) -> None:
    dsn = options.databroker_storage_connection_string
    if options.databroker_storage_type == "kvstore":
        if not dsn:
            problems.error("databroker_storage_connection_string",
                           "config: missing databroker storage backend dsn")
        else:
            try:
                parse_dsn(dsn)
            except BadConnectionString as exc:
                problems.error("databroker_storage_connection_string", str(exc))
    elif dsn:
        problems.warn("databroker_storage_connection_string",
                      "is ignored because databroker_storage_type is memory")
    cert = load_material(reader, problems, inline_key="databroker_storage_cert_file", inline="",
                         file_key="databroker_storage_cert_file",
                         file=options.databroker_storage_cert_file, kind=Pem.CERTS)
    key = load_material(reader, problems, inline_key="databroker_storage_key_file", inline="",
                        file_key="databroker_storage_key_file",
                        file=options.databroker_storage_key_file, kind=Pem.KEY)
    ca = load_material(reader, problems, inline_key="databroker_storage_ca_file", inline="",
                       file_key="databroker_storage_ca_file",
                       file=options.databroker_storage_ca_file, kind=Pem.CERTS)
    if bool(options.databroker_storage_cert_file) != bool(options.databroker_storage_key_file):
        problems.error("databroker_storage_key_file",
                       "databroker_storage_cert_file and databroker_storage_key_file go together")
    elif cert and key:
        if not key_matches_certificate(cert, key):
            problems.error("databroker_storage_key_file",
                           "does not match the certificate in databroker_storage_cert_file")
        else:
            material["storage_client_certificate"] = (cert, key)
    material["storage_ca"] = ca
    tls_settings = [k for k in ("databroker_storage_cert_file", "databroker_storage_ca_file",
                                "databroker_storage_tls_skip_verify") if getattr(options, k)]
    if tls_settings and not dsn.startswith("kvstores"):
        problems.warn(tls_settings[0], "has no effect unless the connection string uses "
                      "kvstores://, kvstores+sentinel:// or kvstores+cluster://")


def _secret(options: Options, name: str, reader: Reader, problems: Problems) -> str:
    inline, location = getattr(options, name), getattr(options, f"{name}_file")
    if inline and location:
        problems.error(f"{name}_file", f"specified both `{name}` and `{name}_file`; set only one")
        return ""
    if location:
        try:
            return reader.read(location).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            problems.error(f"{name}_file", f"cannot read {location}: {exc}")
            return ""
    return str(inline)


def _secrets(options: Options, reader: Reader, problems: Problems,
             material: dict[str, Any], generated: list[str]) -> None:
    memory_aio = options.all_in_one and options.databroker_storage_type == "memory"
    _key(options, "shared_secret", reader, problems, material, generated,
         ephemeral_ok=memory_aio, label="shared-key", wrap="",
         missing="config: shared-key cannot be empty; set it to 32 random bytes in base64 "
                 "(head -c32 /dev/urandom | base64)")
    _key(options, "cookie_secret", reader, problems, material, generated,
         ephemeral_ok=memory_aio or not (options.runs("proxy") or options.runs("authenticate")),
         label="cookie-secret", wrap="proxy: invalid 'COOKIE_SECRET': ",
         missing="proxy: invalid 'COOKIE_SECRET': config: cookie_secret is required; set it "
                 "to 32 random bytes in base64")


def _key(options: Options, name: str, reader: Reader, problems: Problems,
         material: dict[str, Any], generated: list[str], *, ephemeral_ok: bool, label: str,
         wrap: str, missing: str) -> None:
    """A 256-bit key from ``name`` / ``name_file``; a per-process random one where allowed."""
    text = _secret(options, name, reader, problems)
    if not text:
        if ephemeral_ok:
            material[name] = ephemeral_secret(name)
            generated.append(name)
        else:
            problems.error(name, missing)
        return
    try:
        material[name] = decode_secret(text, label)
    except ValueError as exc:
        problems.error(name, f"{wrap}{exc}")


def _workers(options: Options, routes: tuple[Route, ...], problems: Problems,
             material: dict[str, Any]) -> None:
    """``workers`` > 1: processes that share nothing but the listeners and the kvstore
    must not each keep state that a user's next request, on another worker, needs."""
    count = options.workers
    if count <= 1:
        return
    if not options.runs("proxy"):
        problems.error("workers", f"is {count}, but services is {options.services}: workers "
                       "run the proxy service (set services to all or proxy, or workers to 1)")
    if options.databroker_storage_type == "memory" and options.all_in_one:
        problems.error("workers", f"is {count} with databroker_storage_type memory: each "
                       "worker would keep its own sessions, and a user signed in on one would "
                       "be asked to sign in again on another; set databroker_storage_type to "
                       "kvstore (shared by the workers) or workers to 1")
    if needs_identity(options, routes) and not material.get("signing_key"):
        problems.error("workers", f"is {count} but signing_key is not set: each worker would "
                       "sign identity assertions with its own ephemeral key, which upstreams "
                       "could not verify; set signing_key (or signing_key_file)")
    if options.autocert and not options.insecure_server:
        problems.error("workers", f"is {count} with autocert: the ACME challenges and "
                       "certificates of one worker are not seen by the others yet; use "
                       "workers: 1 with autocert, or certificates from files")


def _split(options: Options, problems: Problems, material: dict[str, Any]) -> None:
    """Split services talk gRPC: the databroker and authorize serve it; the other
    services reach the databroker at ``databroker_service_url(s)``, and a proxy reaches
    authorize at ``authorize_service_url(s)``."""
    if options.all_in_one:
        return
    if options.services in ("databroker", "authorize") and not options.grpc_insecure \
            and not material.get("certificates") and not options.autocert:
        problems.error("grpc_insecure", "is false (the default when services is not all) "
                       "but no certificate is set to serve gRPC with TLS: set "
                       "certificate_file and certificate_key_file (or certificates), "
                       "autocert: true (the proxies' certificates in a shared autocert_dir), "
                       "or grpc_insecure: true for plaintext gRPC on a trusted network")
    if options.services == "proxy":
        _service_urls(options.authorize_service_url, options.authorize_service_urls,
                      "authorize", problems)
    if options.services in ("proxy", "authenticate", "authorize"):
        if options.databroker_service_urls and options.databroker_storage_type != "memory":
            problems.warn("databroker_storage_type", f"is {options.databroker_storage_type}, "
                          "but this process keeps its records in the databroker at "
                          "databroker_service_url(s): the databroker_storage_* settings "
                          "belong in the databroker's config and are ignored here")
        _service_urls(options.databroker_service_url, options.databroker_service_urls,
                      "databroker", problems)


def _service_urls(single: str, urls: tuple[str, ...], service: str,
                  problems: Problems) -> None:
    for url in urls:
        key = f"{service}_service_url" if url == single else f"{service}_service_urls"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.error(key, f"{url!r} is not a gRPC service URL: use http://HOST:PORT "
                           f"(grpc_insecure on the {service}) or https://HOST:PORT")
            continue
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            problems.error(key, f"{url!r} has an invalid port")


def _providers(options: Options, reader: Reader, problems: Problems,
               material: dict[str, Any]) -> bool:
    """The explicit ``identity_providers``' files: client secrets and CA bundles read
    (by id into the material), ``jwks_file`` read so that a change reloads. True when
    one of them is interactive."""
    secrets: dict[str, str] = {}
    cas: dict[str, bytes] = {}
    interactive = False
    for provider in options.identity_providers:
        if provider.implicit:
            continue
        where = f"{SETTING}[{provider.index}]"
        if provider.id == IMPLICIT_ID and options.idp_provider_url:
            problems.error(f"{where}.id", f"{IMPLICIT_ID!r} is the provider idp_provider_url "
                           "describes; give this one another id, or move the idp_* "
                           "settings into this entry")
        if provider.interactive:
            interactive = True
            secret = provider.client_secret
            if provider.client_secret_file:
                try:
                    secret = reader.read(provider.client_secret_file).decode("utf-8").strip()
                except (OSError, UnicodeDecodeError) as exc:
                    problems.error(f"{where}.client_secret_file",
                                   f"cannot read {provider.client_secret_file}: {exc}")
                    continue
                if not secret:
                    problems.error(f"{where}.client_secret_file",
                                   f"{provider.client_secret_file} is empty")
            secrets[provider.id] = secret
        if provider.ca_file:
            ca = load_material(reader, problems, inline_key="", inline="",
                               file_key=f"{where}.ca_file", file=provider.ca_file,
                               kind=Pem.CERTS)
            if ca:
                cas[provider.id] = ca
        if provider.jwks_file:
            try:
                reader.read(provider.jwks_file)
            except OSError as exc:
                problems.error(f"{where}.jwks_file", f"cannot read {provider.jwks_file}: "
                               f"{exc}")
    material["provider_secrets"] = MappingProxyType(secrets)
    material["provider_cas"] = MappingProxyType(cas)
    return interactive


def _identity(options: Options, routes: tuple[Route, ...], reader: Reader, problems: Problems,
              material: dict[str, Any]) -> None:
    material["idp_client_secret"] = _secret(options, "idp_client_secret", reader, problems)
    listed = _providers(options, reader, problems, material)
    required = needs_identity(options, routes)
    if required:
        why = ("a route requires sign-in" if options.all_in_one
               else f"services is {options.services}")
        missing = [k for k in ("authenticate_service_url", "idp_provider", "idp_client_id",
                               "idp_provider_url") if not getattr(options, k)]
        if not material["idp_client_secret"]:
            missing.append("idp_client_secret")
        if options.services in ("proxy", "authorize"):
            missing = [k for k in missing if k == "authenticate_service_url"]
        elif listed:
            # people sign in through identity_providers' entries: the idp_* settings
            # describe one more provider only when set, and then wholly
            keep = ("authenticate_service_url",) if not options.idp_provider_url else (
                "authenticate_service_url", "idp_provider", "idp_client_id",
                "idp_client_secret")
            missing = [k for k in missing if k in keep]
        for key in missing:
            problems.error(key, f"is required ({why})")
        if not options.authenticate_callback_path.startswith("/"):
            problems.error("authenticate_callback_path",
                           f"must start with '/', got {options.authenticate_callback_path!r}")
    signing = load_material(
        reader, problems, inline_key="signing_key", inline=options.signing_key,
        file_key="signing_key_file", file=options.signing_key_file, kind=Pem.KEY)
    if signing:
        private = load_key(signing)
        expected = {"ES256": ec.EllipticCurvePrivateKey, "EdDSA": ed25519.Ed25519PrivateKey,
                    "RS256": rsa.RSAPrivateKey}[options.signing_key_algorithm]
        if not isinstance(private, expected) or (
            isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name != "secp256r1"
        ):
            problems.error("signing_key", f"the key does not suit signing_key_algorithm "
                           f"{options.signing_key_algorithm} (ES256 needs a P-256 EC key, EdDSA "
                           "an Ed25519 key, RS256 an RSA key)")
        material["signing_key"] = signing
    grouped = [r.index for r in routes if r.allowed_groups]
    if grouped and not options.idp_service_account:
        problems.warn("idp_service_account", "unset, but allowed_groups is used by "
                      + ", ".join(f"policy[{i}]" for i in grouped)
                      + ": group-based rules never match without it")
    in_policy = [r.index for r in routes if r.policy_document is not None and any(
        c.name == "groups" for c in criteria_of(r.policy_document))]
    if in_policy and not options.idp_service_account:
        problems.warn("idp_service_account", "unset, but the groups criterion is used by "
                      + ", ".join(f"policy[{i}].policy" for i in in_policy)
                      + ": it never matches without it")
    certified = [r.index for r in routes if r.policy_document is not None
                 and not r.tls_downstream_client_ca and not material.get("client_ca") and any(
                     c.name == "client_certificate" for c in criteria_of(r.policy_document))]
    if certified:
        problems.warn("client_ca", "unset, and no tls_downstream_client_ca on "
                      + ", ".join(f"policy[{i}]" for i in certified)
                      + ", whose policy uses client_certificate: a certificate no CA checked "
                        "is not read, so the criterion never matches")
    _directory(options, reader, problems)


def _directory(options: Options, reader: Reader, problems: Problems) -> None:
    """A service account that describes a directory (LDAP) must be usable as written;
    other providers' accounts are not checked here."""
    if not options.idp_service_account:
        return
    from gateway.config.service_account import (  # ldaptor only when the setting is used
        ServiceAccountError,
        parse_service_account,
    )

    try:
        parse_service_account(options.idp_service_account, reader.read)
    except ServiceAccountError as exc:
        problems.error("idp_service_account", exc.detail)


def _branding(options: Options, problems: Problems) -> None:
    """The pages' optional product name and logo (beyond the reference)."""
    name = options.branding_product_name
    if len(name) > 80 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        problems.error("branding_product_name",
                       "must be at most 80 characters without control characters")
    logo = options.branding_logo_url
    if not logo:
        return
    if logo.startswith("data:"):
        if not logo.startswith("data:image/"):
            problems.error("branding_logo_url", f"a data: URI must be an image "
                           f"(data:image/...), got {logo[:40]!r}")
        return
    parts = urlsplit(logo)
    if parts.scheme not in ("https", "http") or not parts.hostname or any(
            c in logo for c in " \"'<>`"):
        problems.error("branding_logo_url",
                       f"must be an https URL (or a data:image URI), got {logo[:80]!r}")


def _ssh_bounds(options: Options, problems: Problems) -> None:
    """0 would refuse every browser sign-in over SSH: no key could ever be bound."""
    for key in ("ssh_max_pending_sign_ins_per_address", "ssh_max_pending_sign_ins"):
        if getattr(options, key) < 1:
            problems.error(key, "must be at least 1 (0 would refuse every SSH sign-in)")
    if options.ssh_max_pending_sign_ins_per_address > options.ssh_max_pending_sign_ins:
        problems.warn("ssh_max_pending_sign_ins_per_address",
                      f"is above ssh_max_pending_sign_ins "
                      f"({options.ssh_max_pending_sign_ins}), which bounds it")


def _routes_against_globals(options: Options, routes: tuple[Route, ...],
                            problems: Problems) -> None:
    seen: dict[tuple[str, int | None, str, str, str], int] = {}
    forward_auth = urlsplit(options.forward_auth_url).hostname if options.forward_auth_url \
        else None
    known = {p.id: p for p in options.identity_providers}
    for route in routes:
        for position, name in enumerate(route.identity_providers):
            if name not in known:
                problems.error(f"policy[{route.index}].identity_providers[{position}]",
                               f"no identity provider has the id {name!r} (known: "
                               f"{', '.join(known) or 'none'})")
        if route.identity_providers and route.allow_public_unauthenticated_access:
            problems.warn(f"policy[{route.index}].identity_providers",
                          "has no effect on a public route (nobody is asked to sign in)")
        if forward_auth and route.host == forward_auth.lower():
            problems.warn(f"policy[{route.index}].from",
                          f"{route.host} is the forward_auth_url host, whose requests are "
                          "forward-auth questions: this route is never used")
        limit = options.timeout_write
        if limit and route.timeout > limit and not (route.allow_websockets or route.allow_spdy
                                                   or route.tcp):
            problems.error(f"policy[{route.index}].timeout",
                           f"{route.timeout:g}s exceeds timeout_write ({limit:g}s); a route "
                           "timeout cannot exceed the global timeouts")
        key = (route.host, route.port, route.path, route.prefix, route.regex)
        if key in seen:
            problems.warn(f"policy[{route.index}]",
                          f"matches the same requests as policy[{seen[key]}] and is never used")
        else:
            seen[key] = route.index
    if not routes and options.runs("proxy"):
        problems.warn("policy", "no policy configured: the gateway starts but cannot authorize "
                      "or proxy any traffic until routes are added")
