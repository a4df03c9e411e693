"""Every global setting of the reference, as one frozen dataclass.

The field metadata *is* the schema: the loader reads kinds, environment names and
choices from it, ``conf/config.example.yaml`` is checked against it, and ``gateway
check`` prints from it. Durations are stored as float seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from gateway.config.providers import IdentityProvider


class Kind(StrEnum):
    """How a setting's value is written and parsed."""

    STR = "string"
    BOOL = "bool"
    DURATION = "duration"
    INT = "uint32"
    FLOAT = "float"
    ENUM = "enum"
    URL = "url"
    URL_LIST = "url list"
    ADDRESS = "host:port"
    LIST = "list of string"
    MAP = "map of string"
    HEADERS = "header map"
    CLAIM_HEADERS = "claim header list or map"
    BASE64 = "base64"
    FILE = "file location"
    SECRET = "base64 256-bit key"
    CERTIFICATES = "certificate pairs"
    WORKERS = "count or auto"
    PROVIDERS = "identity provider list"


SERVICES = ("all", "authenticate", "authorize", "databroker", "proxy")
LOG_LEVELS = ("debug", "info", "warn", "error")
UNDERSCORE_ACTIONS = ("allow", "drop", "reject")
PARAMETER_ACTIONS = ("strip", "reject")
IDP_PROVIDERS = ("oidc", "idpvendor1", "idpvendor2", "idpvendor3", "idpvendor4", "idpvendor5")
DEFAULT_RESPONSE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "SAMEORIGIN",
    "X-XSS-Protection": "1; mode=block",
    "Strict-Transport-Security": "max-age=31536000; includeSubDomains; preload",
}


def default_autocert_dir() -> str:
    """``$XDG_DATA_HOME/gateway``, falling back to ``$HOME/.local/share/gateway``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "gateway")


def _s(
    default: Any,
    kind: Kind,
    doc: str,
    *,
    env: str | None = "",
    choices: tuple[str, ...] = (),
    secret: bool = False,
    bootstrap: bool = False,
    extension: bool = False,
) -> Any:
    """Declare one setting. ``env=None`` marks it ``file only``; ``""`` means KEY.upper()."""
    meta = {
        "kind": kind,
        "doc": doc,
        "env": env,
        "choices": choices,
        "secret": secret,
        "bootstrap": bootstrap,
        "extension": extension,
    }
    if isinstance(default, dict):
        frozen = MappingProxyType(dict(default))
        return field(default_factory=lambda: frozen, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class CertificatePair:
    """One entry of ``certificates``: file locations of a certificate chain and its key."""

    cert: str
    key: str


@dataclass(frozen=True)
class Options:
    """The global settings after parsing, defaulting and derivation (see ``build``)."""

    # --- shared settings -------------------------------------------------------------
    address: str = _s(":443", Kind.ADDRESS, "Host and port for HTTP serving; empty means :443.")
    autocert: bool = _s(False, Kind.BOOL, "Obtain and renew TLS certificates through ACME.")
    autocert_must_staple: bool = _s(
        False, Kind.BOOL, "Request certificates with the OCSP must-staple extension."
    )
    autocert_dir: str = _s(
        "", Kind.STR, "Where autocert stores certificate data (shared between instances)."
    )
    autocert_use_staging: bool = _s(False, Kind.BOOL, "Use the ACME CA's staging environment.")
    autocert_ca: str = _s(
        "", Kind.URL, "ACME directory URL (beyond the reference: private CAs).", extension=True
    )
    autocert_trusted_ca: str = _s(
        "", Kind.BASE64, "CA bundle trusted for autocert_ca (beyond the reference).",
        extension=True,
    )
    autocert_trusted_ca_file: str = _s(
        "", Kind.FILE, "File form of autocert_trusted_ca (beyond the reference).", extension=True
    )
    certificates: tuple[CertificatePair, ...] = _s(
        (), Kind.CERTIFICATES, "Certificate pairs: list of {cert, key} file locations.", env=None
    )
    certificate: str = _s("", Kind.BASE64, "Inline PEM certificate chain, base64.")
    certificate_key: str = _s("", Kind.BASE64, "Inline PEM private key, base64.", secret=True)
    certificate_file: str = _s("", Kind.FILE, "PEM certificate chain file.")
    certificate_key_file: str = _s("", Kind.FILE, "PEM private key file.")
    client_ca: str = _s("", Kind.BASE64, "CA validating downstream client certificates (mTLS).")
    client_ca_file: str = _s("", Kind.FILE, "File form of client_ca.")
    client_crl: str = _s("", Kind.BASE64, "PEM CRL for client certificates, base64.")
    client_crl_file: str = _s("", Kind.FILE, "File form of client_crl.")
    cookie_name: str = _s("_gateway", Kind.STR, "Name of the session cookie.")
    cookie_secret: str = _s(
        "", Kind.SECRET, "Encrypts and authenticates session cookies.", secret=True
    )
    cookie_secret_file: str = _s(
        "", Kind.FILE, "File holding cookie_secret (beyond the reference).", extension=True
    )
    cookie_domain: str = _s("", Kind.STR, "Domain scope of session cookies.")
    cookie_secure: bool = _s(True, Kind.BOOL, "Send session cookies over HTTPS only.")
    cookie_http_only: bool = _s(True, Kind.BOOL, "Hide session cookies from scripts.")
    cookie_expire: float = _s(14 * 3600.0, Kind.DURATION, "Session lifetime.")
    gateway_debug: bool = _s(
        False, Kind.BOOL, "Coloured human-readable logs instead of JSON.", env="GATEWAY_DEBUG"
    )
    forward_auth_url: str = _s("", Kind.URL, "Enables the forward-authentication endpoint.")
    headers_with_underscores_action: str = _s(
        "allow", Kind.ENUM,
        "Client headers with '_' in their name: allow, drop or reject (400) "
        "(beyond the reference).",
        choices=UNDERSCORE_ACTIONS, extension=True,
    )
    path_with_parameters_action: str = _s(
        "strip", Kind.ENUM,
        "';' parameters on a path segment other than the last: strip (route, authorize "
        "and forward the path without them) or reject (400) (beyond the reference).",
        choices=PARAMETER_ACTIONS, extension=True,
    )
    timeout_read: float = _s(30.0, Kind.DURATION, "Global server read timeout.")
    timeout_write: float = _s(0.0, Kind.DURATION, "Global server write timeout (0: none).")
    timeout_idle: float = _s(300.0, Kind.DURATION, "Global server idle timeout; on "
                             "an MCP route also how long the upstream may be silent "
                             "(0: unbounded there).")
    shutdown_drain_timeout: float = _s(
        8.0, Kind.DURATION,
        "On SIGTERM: how long requests, tunnels and SSH sessions in flight may go on "
        "(new connections refused) before they are closed; 0: closed at once (beyond "
        "the reference).", extension=True,
    )
    grpc_address: str = _s(
        "", Kind.ADDRESS, "Where gRPC is served (:443; :5443 in all-in-one mode)."
    )
    grpc_insecure: bool | None = _s(
        None, Kind.BOOL, "Disable transport security for gRPC (true in all-in-one mode)."
    )
    grpc_client_timeout: float = _s(10.0, Kind.DURATION, "Deadline of outgoing gRPC calls.")
    grpc_client_dns_roundrobin: bool = _s(
        True, Kind.BOOL, "Round-robin gRPC calls across a DNS record's addresses."
    )
    grpc_server_max_connection_age: float = _s(
        300.0, Kind.DURATION, "Age after which gRPC clients are asked to reconnect."
    )
    grpc_server_max_connection_age_grace: float = _s(
        300.0, Kind.DURATION, "Grace on top of the max age before connections are closed."
    )
    http_redirect_addr: str = _s("", Kind.ADDRESS, "Address of the http-to-https redirector.")
    insecure_server: bool = _s(False, Kind.BOOL, "Serve plain HTTP (behind a TLS ingress only).")
    dns_lookup_family: str = _s(
        "AUTO", Kind.ENUM, "DNS resolution policy.", choices=("V4_ONLY", "V6_ONLY", "AUTO")
    )
    log_level: str = _s("info", Kind.ENUM, "Minimum level logged.", choices=LOG_LEVELS)
    proxy_log_level: str = _s(
        "", Kind.ENUM, "Minimum level of access logs (default: log_level).", choices=LOG_LEVELS
    )
    metrics_address: str = _s("", Kind.ADDRESS, "Exposes the metrics endpoint (off if unset).")
    metrics_basic_auth: str = _s(
        "", Kind.BASE64, "base64 of username:password required on the metrics endpoint.",
        secret=True,
    )
    metrics_certificate: str = _s("", Kind.BASE64, "Metrics endpoint TLS certificate, base64.")
    metrics_certificate_key: str = _s(
        "", Kind.BASE64, "Metrics endpoint TLS key, base64.", secret=True
    )
    metrics_certificate_file: str = _s("", Kind.FILE, "Metrics endpoint TLS certificate file.")
    metrics_certificate_key_file: str = _s("", Kind.FILE, "Metrics endpoint TLS key file.")
    metrics_client_ca: str = _s("", Kind.BASE64, "CA for metrics client certificates, base64.")
    metrics_client_ca_file: str = _s("", Kind.FILE, "File form of metrics_client_ca.")
    services: str = _s(
        "all", Kind.ENUM, "Which services run in this process.", choices=SERVICES, bootstrap=True
    )
    shared_secret: str = _s(
        "", Kind.SECRET, "Authenticates calls between services.", secret=True
    )
    shared_secret_file: str = _s(
        "", Kind.FILE, "File holding shared_secret (beyond the reference).", extension=True
    )
    use_proxy_protocol: bool = _s(False, Kind.BOOL, "Require PROXY protocol v1/v2 headers.")
    # connection cap (beyond the reference)
    max_connections: int = _s(
        0, Kind.INT, "Open downstream connections per process; 0: from RLIMIT_NOFILE "
        "(beyond the reference).", extension=True
    )
    workers: int = _s(
        1, Kind.WORKERS, "Processes serving the data plane, sharing its listeners; auto: one "
        "per CPU (bootstrap only; beyond the reference).", bootstrap=True, extension=True
    )
    dataplane_admin_address: str = _s(
        "", Kind.STR, "Data-plane admin listener (bootstrap only).", bootstrap=True
    )
    dataplane_admin_access_log_path: str = _s(
        "", Kind.STR, "Data-plane admin access log (bootstrap only).", bootstrap=True
    )
    dataplane_admin_profile_path: str = _s(
        "", Kind.STR, "Data-plane admin profile output (bootstrap only).", bootstrap=True
    )
    # --- tracing ---------------------------------------------------------------------
    tracing_provider: str = _s(
        "", Kind.ENUM, "Tracing provider.",
        choices=("agenttrace", "thrifttrace", "httptrace", "otlp")
    )
    tracing_sample_rate: float = _s(0.0001, Kind.FLOAT, "Fraction of requests sampled (0-1).")
    tracing_agenttrace_address: str = _s(
        "localhost:8126", Kind.ADDRESS, "host:port of the agenttrace agent."
    )
    tracing_thrifttrace_collector_endpoint: str = _s(
        "", Kind.URL, "URL of the thrifttrace HTTP collector."
    )
    tracing_thrifttrace_agent_endpoint: str = _s(
        "", Kind.ADDRESS, "Address of the thrifttrace agent."
    )
    tracing_httptrace_endpoint: str = _s("", Kind.URL, "URL of the httptrace span endpoint.")
    tracing_caller_sampled_per_second: int = _s(
        100, Kind.INT, "Traces callers may force (a sampled traceparent) per second beyond "
        "the sample rate (beyond the reference).", extension=True
    )
    tracing_user_id: bool = _s(
        True, Kind.BOOL, "Spans carry the signed-in user's id (beyond the reference).",
        extension=True
    )
    # --- OpenTelemetry (beyond the reference): each also read from its standard OTEL_*
    # environment variable, which wins over the file; see gateway/observability/otel.py
    otel_traces_exporter: str = _s(
        "", Kind.ENUM, "otlp: trace over OTLP (as tracing_provider: otlp); none: no tracing.",
        choices=("otlp", "none"), extension=True
    )
    otel_exporter_otlp_endpoint: str = _s(
        "", Kind.URL, "Base URL of the OTLP collector.", extension=True
    )
    otel_exporter_otlp_traces_endpoint: str = _s(
        "", Kind.URL, "URL spans are sent to (overrides the base endpoint).", extension=True
    )
    otel_exporter_otlp_protocol: str = _s(
        "http/protobuf", Kind.ENUM, "OTLP transport.", choices=("http/protobuf", "grpc"),
        extension=True
    )
    otel_exporter_otlp_traces_protocol: str = _s(
        "", Kind.ENUM, "OTLP transport of spans.", choices=("http/protobuf", "grpc"),
        extension=True
    )
    otel_exporter_otlp_headers: Mapping[str, str] = _s(
        {}, Kind.MAP, "Headers of every OTLP request.", secret=True, extension=True
    )
    otel_exporter_otlp_traces_headers: Mapping[str, str] = _s(
        {}, Kind.MAP, "Headers of OTLP span requests (instead of the general ones).",
        secret=True, extension=True
    )
    otel_exporter_otlp_timeout: int = _s(
        10000, Kind.INT, "Milliseconds an OTLP export may take.", extension=True
    )
    otel_exporter_otlp_traces_timeout: int = _s(
        0, Kind.INT, "Milliseconds an OTLP span export may take (0: the general one).",
        extension=True
    )
    otel_exporter_otlp_certificate: str = _s(
        "", Kind.STR, "PEM file of the CA that signs the collector's certificate.",
        extension=True
    )
    otel_exporter_otlp_client_certificate: str = _s(
        "", Kind.STR, "PEM file of the client certificate shown to the collector.",
        extension=True
    )
    otel_exporter_otlp_client_key: str = _s(
        "", Kind.STR, "PEM file of the client certificate's key.", extension=True
    )
    otel_service_name: str = _s(
        "", Kind.STR, "service.name of what the gateway exports.", extension=True
    )
    otel_resource_attributes: Mapping[str, str] = _s(
        {}, Kind.MAP, "Resource attributes of what the gateway exports.", extension=True
    )
    otel_traces_sampler: str = _s(
        "", Kind.ENUM, "Sampler (instead of tracing_sample_rate).",
        choices=("always_on", "always_off", "traceidratio", "parentbased_always_on",
                 "parentbased_always_off", "parentbased_traceidratio"), extension=True
    )
    otel_traces_sampler_arg: str = _s(
        "", Kind.STR, "The ratio of the traceidratio samplers.", extension=True
    )
    otel_propagators: tuple[str, ...] = _s(
        (), Kind.LIST, "Trace context formats read and written.", extension=True
    )
    otel_sdk_disabled: bool = _s(
        False, Kind.BOOL, "No tracing and no OTLP export at all.", extension=True
    )
    otel_metrics_exporter: str = _s(
        "", Kind.ENUM, "otlp: push the metrics to the collector too.",
        choices=("otlp", "prometheus", "none"), extension=True
    )
    otel_metric_export_interval: int = _s(
        60000, Kind.INT, "Milliseconds between OTLP metric pushes.", extension=True
    )
    otel_logs_exporter: str = _s(
        "", Kind.ENUM, "otlp: the audit stream as OTLP log records too.",
        choices=("otlp", "none"), extension=True
    )
    # --- authorization audit stream (beyond the reference) ---------------------------
    audit_log: bool = _s(
        False, Kind.BOOL, "Every authorization decision as an event in gateway.audit.",
        extension=True
    )
    audit_log_file: str = _s(
        "", Kind.STR, "JSON-lines file of the audit events (0600, reopened on SIGHUP).",
        extension=True
    )
    authorize_log_fields: tuple[str, ...] = _s(
        (), Kind.LIST, "Fields of an audit event (default: all; beyond the reference).",
        extension=True
    )
    # --- authenticate ----------------------------------------------------------------
    authenticate_callback_path: str = _s(
        "/oauth2/callback", Kind.STR, "Path of the identity provider's redirect URI."
    )
    authenticate_service_url: str = _s(
        "", Kind.URL, "External URL of the authenticate service."
    )
    idp_allow_unverified_email: bool = _s(
        False, Kind.BOOL,
        "Use e-mail addresses the provider marks email_verified: false in decisions "
        "(insecure; beyond the reference).", extension=True
    )
    idp_client_id: str = _s("", Kind.STR, "OAuth 2.0 client identifier.")
    idp_client_secret: str = _s("", Kind.STR, "OAuth 2.0 client secret.", secret=True)
    idp_client_secret_file: str = _s(
        "", Kind.FILE, "File holding idp_client_secret (beyond the reference).", extension=True
    )
    idp_provider: str = _s("", Kind.ENUM, "Identity provider.", choices=IDP_PROVIDERS)
    idp_scopes: tuple[str, ...] = _s(
        ("openid", "profile", "email", "offline_access"), Kind.LIST, "OAuth 2.0 scopes."
    )
    idp_service_account: str = _s(
        "", Kind.STR, "Directory credentials (format per provider).", secret=True
    )
    idp_provider_url: str = _s("", Kind.URL, "Base URL of the OIDC discovery document.")
    idp_request_params: Mapping[str, str] = _s(
        {}, Kind.MAP, "Extra parameters of the sign-in request."
    )
    identity_providers: tuple[IdentityProvider, ...] = _s(
        (), Kind.PROVIDERS, "Identity providers by id: interactive ones (client_id) people "
        "sign in through, bearer issuers (bearer: {audiences}) whose JWTs machines present; "
        "the idp_* settings are the one with id default (beyond the reference).",
        env=None, extension=True,
    )
    idp_refresh_directory_interval: float = _s(
        600.0, Kind.DURATION, "Directory synchronisation interval."
    )
    idp_refresh_directory_timeout: float = _s(
        60.0, Kind.DURATION, "Time limit of one directory synchronisation."
    )
    # --- MCP clients (routes with mcp) ---------------------------------------------------
    mcp_allowed_client_id_domains: tuple[str, ...] = _s(
        (), Kind.LIST, "Hosts whose client ID metadata documents MCP clients may sign in "
        "with (empty: none; beyond the reference).", extension=True,
    )
    mcp_dynamic_client_registration: bool = _s(
        False, Kind.BOOL, "Let MCP clients register themselves (RFC 7591; deprecated by "
        "MCP 2026-07-28; beyond the reference).", extension=True,
    )
    mcp_client_id_metadata_allowed_networks: tuple[str, ...] = _s(
        (), Kind.LIST, "Networks (CIDRs) a client ID metadata document may be fetched from "
        "although they are private, loopback or otherwise special-use (empty: none; beyond "
        "the reference).", extension=True,
    )
    mcp_client_id_metadata_ca_file: str = _s(
        "", Kind.FILE, "CA bundle the https of client ID metadata documents is verified "
        "against (unset: the system store; beyond the reference).", extension=True,
    )
    # --- proxy -----------------------------------------------------------------------
    authorize_service_url: str = _s("", Kind.URL, "Internal URL of the authorize service.")
    authorize_service_urls: tuple[str, ...] = _s(
        (), Kind.URL_LIST, "Several authorize service URLs."
    )
    certificate_authority: str = _s("", Kind.BASE64, "CA for service-to-service TLS, base64.")
    certificate_authority_file: str = _s("", Kind.FILE, "File form of certificate_authority.")
    default_upstream_timeout: float = _s(
        30.0, Kind.DURATION, "Timeout of routes that set none."
    )
    set_response_headers: Mapping[str, str] = _s(
        DEFAULT_RESPONSE_HEADERS, Kind.HEADERS, "Headers added to every response."
    )
    jwt_claims_headers: Mapping[str, str] = _s(
        {}, Kind.CLAIM_HEADERS, "Session claims passed upstream: header name -> claim."
    )
    override_certificate_name: str = _s(
        "", Kind.STR, "Name matched against certificates instead of the route host."
    )
    programmatic_redirect_domain_whitelist: tuple[str, ...] = _s(
        ("localhost",), Kind.LIST, "Allowed redirect domains of programmatic login.", env=None
    )
    refresh_cooldown: float = _s(300.0, Kind.DURATION, "Minimum time between manual refreshes.")
    skip_xff_append: bool = _s(False, Kind.BOOL, "Do not append to X-Forwarded-For.")
    xff_num_trusted_hops: int = _s(0, Kind.INT, "Number of trusted proxies in front.")
    codec_type: str = _s(
        "", Kind.ENUM, "Downstream codec (auto; http1 in all-in-one mode).",
        choices=("auto", "http1", "http2"),
    )
    signout_redirect_url: str = _s("", Kind.URL, "Where users go after signing out.")
    branding_product_name: str = _s(
        "", Kind.STR, "Product name shown on the gateway's own pages (beyond the reference).",
        extension=True,
    )
    branding_logo_url: str = _s(
        "", Kind.STR, "Logo shown on the gateway's own pages: an https URL or a data:image "
        "URI (beyond the reference).", extension=True,
    )
    # --- databroker ------------------------------------------------------------------
    databroker_service_url: str = _s("", Kind.URL, "Location of the databroker.")
    databroker_service_urls: tuple[str, ...] = _s(
        (), Kind.URL_LIST, "Several databroker URLs."
    )
    databroker_storage_type: str = _s(
        "memory", Kind.ENUM, "Storage backend.", choices=("memory", "kvstore")
    )
    databroker_storage_connection_string: str = _s(
        "", Kind.STR, "kvstore connection URL.", secret=True
    )
    databroker_storage_cert_file: str = _s("", Kind.FILE, "Client certificate for kvstore TLS.")
    databroker_storage_key_file: str = _s("", Kind.FILE, "Client key for kvstore TLS.")
    databroker_storage_ca_file: str = _s("", Kind.FILE, "CA verifying kvstore servers.")
    databroker_storage_tls_skip_verify: bool = _s(
        False, Kind.BOOL, "Do not verify kvstore TLS certificates (testing only)."
    )
    # --- authorize -------------------------------------------------------------------
    signing_key: str = _s(
        "", Kind.BASE64, "PEM private key signing the identity assertion, base64.", secret=True
    )
    signing_key_file: str = _s(
        "", Kind.FILE, "File form of signing_key (beyond the reference).", extension=True
    )
    signing_key_algorithm: str = _s(
        "ES256", Kind.ENUM, "Assertion signature algorithm.", choices=("ES256", "EdDSA", "RS256")
    )
    enable_cloud_serverless_authentication: bool = _s(
        False, Kind.BOOL, "Send a signed Authorization header to cloud serverless upstreams."
    )
    cloud_serverless_authentication_service_account: str = _s(
        "", Kind.BASE64, "Service account for cloud serverless authentication.", secret=True
    )
    # --- native SSH (beyond the reference; names follow Pomerium's) ------------------
    ssh_address: str = _s(
        "", Kind.ADDRESS, "Where the SSH server listens (ssh:// routes); unset: no SSH.",
        extension=True,
    )
    ssh_host_keys: tuple[str, ...] = _s(
        (), Kind.LIST, "The SSH server's host keys (ed25519/ECDSA private keys, base64 or "
        "PEM text).", secret=True, extension=True,
    )
    ssh_host_key_files: tuple[str, ...] = _s(
        (), Kind.LIST, "Files holding the SSH server's host keys.", extension=True,
    )
    ssh_user_ca_key: str = _s(
        "", Kind.STR, "Private key of the CA signing certificates for SSH servers "
        "(base64 or PEM text).", secret=True, extension=True,
    )
    ssh_user_ca_key_file: str = _s(
        "", Kind.FILE, "File form of ssh_user_ca_key.", extension=True,
    )
    ssh_recording_dir: str = _s(
        "", Kind.STR, "Directory of SSH session recordings (asciicast v2); unset: none.",
        extension=True,
    )
    ssh_max_pending_sign_ins_per_address: int = _s(
        5, Kind.INT, "Pending SSH browser sign-ins (each 5 minutes unless confirmed) of one "
        "client address (IPv6: its /64), per gateway process.", extension=True,
    )
    ssh_max_pending_sign_ins: int = _s(
        250, Kind.INT, "Pending SSH browser sign-ins from all addresses, per gateway "
        "process.", extension=True,
    )

    @property
    def all_in_one(self) -> bool:
        return self.services == "all"

    @property
    def service_label(self) -> str:
        """The ``service`` of metrics and traces: ``gateway`` in all-in-one mode,
        ``gateway-<service>`` otherwise (reference, "Observability outputs")."""
        return "gateway" if self.all_in_one else f"gateway-{self.services}"

    @property
    def remote_authorize(self) -> bool:
        """A proxy that asks an authorize service for every decision
        (``authorize_service_url(s)``) instead of deciding in process."""
        return self.services == "proxy" and bool(self.authorize_service_urls)

    @property
    def signs_assertions(self) -> bool:
        """Whether this process signs identity assertions: it decides requests itself
        (all-in-one, authorize, a proxy without ``authorize_service_url(s)``)."""
        return self.services in ("all", "authorize") or (
            self.services == "proxy" and not self.remote_authorize)

    def runs(self, service: str) -> bool:
        """Whether this process runs ``service`` (``all`` runs every one)."""
        return self.services in ("all", service)


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """Schema entry of one setting, derived from the ``Options`` field."""

    key: str
    kind: Kind
    doc: str
    env: str | None
    choices: tuple[str, ...]
    secret: bool
    bootstrap: bool
    extension: bool
    default: Any


def _schema() -> dict[str, SettingInfo]:
    out: dict[str, SettingInfo] = {}
    for f in fields(Options):
        meta = f.metadata
        env = meta["env"]
        if f.default is not MISSING:
            default: Any = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:  # pragma: no cover - every field has a default
            default = None
        out[f.name] = SettingInfo(
            key=f.name,
            kind=meta["kind"],
            doc=meta["doc"],
            env=f.name.upper() if env == "" else env,
            choices=meta["choices"],
            secret=meta["secret"],
            bootstrap=meta["bootstrap"],
            extension=meta["extension"],
            default=default,
        )
    return out


SETTINGS: dict[str, SettingInfo] = _schema()
"""Schema of every global setting, by key (the policy is described in ``routes``)."""
