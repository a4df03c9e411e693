"""The observability settings' cross-setting rules: the metrics endpoint's credentials
and TLS material, each tracing provider's endpoint, the ``otel_*`` settings
(``config.otel``) and the fields of an audit event. Part of ``validate``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gateway.config.audit_fields import AUDIT_FIELDS
from gateway.config.errors import Problems
from gateway.config.material import Pem, Reader, load_material
from gateway.config.otel import problems as otel_problems
from gateway.config.settings import Options
from gateway.config.values import decode_base64


def observability(options: Options, reader: Reader, problems: Problems,
                  material: dict[str, Any]) -> None:
    """The metrics endpoint's credentials and TLS material (into ``material``), the
    tracing and OpenTelemetry settings, and the audit events' fields."""
    if options.metrics_basic_auth:
        user, sep, password = decode_base64(options.metrics_basic_auth).decode(
            "utf-8", "replace").partition(":")
        if not sep or not user:
            problems.error("metrics_basic_auth", "must be base64 of username:password")
        else:
            material["metrics_basic_auth"] = (user, password)
    cert = load_material(reader, problems, inline_key="metrics_certificate",
                         inline=options.metrics_certificate, file_key="metrics_certificate_file",
                         file=options.metrics_certificate_file, kind=Pem.CERTS)
    key = load_material(reader, problems, inline_key="metrics_certificate_key",
                        inline=options.metrics_certificate_key,
                        file_key="metrics_certificate_key_file",
                        file=options.metrics_certificate_key_file, kind=Pem.KEY)
    if bool(cert) != bool(key) and not problems.errors:
        problems.error("metrics_certificate_key", "metrics certificate and key go together")
    elif cert and key:
        material["metrics_certificate"] = (cert, key)
    material["metrics_client_ca"] = load_material(
        reader, problems, inline_key="metrics_client_ca", inline=options.metrics_client_ca,
        file_key="metrics_client_ca_file", file=options.metrics_client_ca_file, kind=Pem.CERTS)
    if not 0.0 <= options.tracing_sample_rate <= 1.0:
        problems.error("tracing_sample_rate",
                       f"must be between 0 and 1, got {options.tracing_sample_rate}")
    _tracing(options, problems)


def _tracing(options: Options, problems: Problems) -> None:
    """Each provider's endpoint: ``httptrace`` needs its URL; ``thrifttrace`` its
    collector URL or its agent address (the collector wins when both are set);
    ``agenttrace`` has a default address."""
    provider = options.tracing_provider
    collector = options.tracing_thrifttrace_collector_endpoint
    if provider == "httptrace" and not options.tracing_httptrace_endpoint:
        problems.error("tracing_httptrace_endpoint",
                       "is required when tracing_provider is httptrace")
    if provider == "thrifttrace":
        if not collector and not options.tracing_thrifttrace_agent_endpoint:
            problems.error("tracing_thrifttrace_collector_endpoint",
                           "tracing_provider thrifttrace needs "
                           "tracing_thrifttrace_collector_endpoint (the collector's URL, e.g. "
                           "http://jaeger:14268/api/traces) or "
                           "tracing_thrifttrace_agent_endpoint (the agent's UDP host:port, "
                           "e.g. localhost:6831)")
        elif collector and options.tracing_thrifttrace_agent_endpoint:
            problems.warn("tracing_thrifttrace_agent_endpoint",
                          "ignored: spans go to tracing_thrifttrace_collector_endpoint")
    for key in ("tracing_httptrace_endpoint", "tracing_thrifttrace_collector_endpoint"):
        url = getattr(options, key)
        if url and urlsplit(url).scheme not in ("http", "https"):
            problems.error(key, f"{url}: spans are sent over http or https")
    for key, message, is_error in otel_problems(options):
        (problems.error if is_error else problems.warn)(key, message)
    unknown = sorted(set(options.authorize_log_fields) - set(AUDIT_FIELDS))
    if unknown:
        problems.error("authorize_log_fields", f"unknown field {', '.join(unknown)}; the "
                                               f"fields are {', '.join(AUDIT_FIELDS)}")
