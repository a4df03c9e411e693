"""The ``otel_*`` settings resolved: what goes where over OTLP, how requests are sampled,
which trace context formats are read, what the exported resource says.

Plain functions over ``Options`` (only ``problems`` opens the TLS files, to name a
missing one at load) and no OpenTelemetry import: validation uses them too.
Every ``otel_*`` setting is also read from its standard environment variable
(``OTEL_EXPORTER_OTLP_ENDPOINT`` for ``otel_exporter_otlp_endpoint``, and so on), which
wins over the file as every environment variable of the gateway does.
Among the settings themselves (the OpenTelemetry specification's rules):

- a signal's own setting (``otel_exporter_otlp_traces_endpoint``, ``_protocol``,
  ``_headers``, ``_timeout``) wins over the general one; a signal's endpoint is used as
  it is, the general one gets ``/v1/traces``, ``/v1/metrics`` or ``/v1/logs`` appended
  (HTTP) or is the gRPC target (its scheme saying TLS or not);
- ``otel_service_name`` wins over ``service.name`` in ``otel_resource_attributes``, which
  wins over the gateway's own name (``service_label``);
- ``otel_traces_sampler`` (with ``otel_traces_sampler_arg``) wins over
  ``tracing_sample_rate``; ``otel_traces_sampler_arg`` alone replaces only the rate;
- ``otel_traces_exporter: otlp`` traces over OTLP whatever ``tracing_provider`` says,
  ``none`` turns tracing off;
- ``otel_sdk_disabled: true`` turns off all of it: tracing (every provider), metrics and
  audit events over OTLP. The Prometheus endpoint and the audit log are not
  OpenTelemetry and stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from gateway.config.settings import Options

SIGNALS = ("traces", "metrics", "logs")
DEFAULT_HTTP = "http://localhost:4318"
DEFAULT_GRPC = "http://localhost:4317"
PROPAGATORS = frozenset({"tracecontext", "baggage", "b3", "b3multi", "none"})
# What the gateway reads when otel_propagators is unset: every format it knows.
DEFAULT_PROPAGATORS = frozenset({"tracecontext", "b3", "b3multi"})
RATIO_SAMPLERS = frozenset({"traceidratio", "parentbased_traceidratio"})


@dataclass(frozen=True)
class SignalExport:
    """Where one signal goes: ``endpoint`` is the full URL (HTTP) or the gRPC target
    URL; ``timeout`` in seconds; TLS files may be empty."""

    signal: str
    protocol: str  # "http/protobuf" or "grpc"
    endpoint: str
    headers: tuple[tuple[str, str], ...]
    timeout: float
    certificate: str
    client_certificate: str
    client_key: str

    @property
    def insecure(self) -> bool:
        return urlsplit(self.endpoint).scheme == "http"


@dataclass(frozen=True)
class Sampling:
    """``rate``: the ratio a request without a caller's decision is sampled at;
    ``parent_based``: whether a caller's decision (sampled or not) is followed."""

    rate: float
    parent_based: bool


def _headers(raw: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """W3C Baggage-style values as the variables carry them: percent-decoded."""
    return tuple((name.strip().lower(), unquote(value).strip()) for name, value in raw.items())


def target(options: Options, signal: str) -> SignalExport:
    """The effective OTLP settings of ``signal`` (``traces`` may have its own)."""
    own = signal == "traces"
    protocol = (options.otel_exporter_otlp_traces_protocol if own else "") or \
        options.otel_exporter_otlp_protocol
    endpoint = options.otel_exporter_otlp_traces_endpoint if own else ""
    if not endpoint:
        base = options.otel_exporter_otlp_endpoint or (
            DEFAULT_GRPC if protocol == "grpc" else DEFAULT_HTTP)
        endpoint = base if protocol == "grpc" else f"{base.rstrip('/')}/v1/{signal}"
    headers = (options.otel_exporter_otlp_traces_headers if own else None) or \
        options.otel_exporter_otlp_headers
    timeout_ms = (options.otel_exporter_otlp_traces_timeout if own else 0) or \
        options.otel_exporter_otlp_timeout
    return SignalExport(signal, protocol, endpoint, _headers(headers), timeout_ms / 1000.0,
                  options.otel_exporter_otlp_certificate,
                  options.otel_exporter_otlp_client_certificate,
                  options.otel_exporter_otlp_client_key)


def tracing_provider(options: Options) -> str:
    """The provider spans go to, "" for none."""
    if options.otel_sdk_disabled or options.otel_traces_exporter == "none":
        return ""
    if options.otel_traces_exporter == "otlp":
        return "otlp"
    return options.tracing_provider


def metrics_over_otlp(options: Options) -> bool:
    return options.otel_metrics_exporter == "otlp" and not options.otel_sdk_disabled


def logs_over_otlp(options: Options) -> bool:
    return options.otel_logs_exporter == "otlp" and not options.otel_sdk_disabled


def sampler_ratio(options: Options) -> float | None:
    """``otel_traces_sampler_arg`` as a ratio; None when unset or not a number in 0..1."""
    text = options.otel_traces_sampler_arg.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def sampling(options: Options) -> Sampling:
    sampler = options.otel_traces_sampler
    ratio = sampler_ratio(options)
    if not sampler:
        return Sampling(options.tracing_sample_rate if ratio is None else ratio, True)
    parent_based = sampler.startswith("parentbased_")
    if sampler.endswith("always_on"):
        return Sampling(1.0, parent_based)
    if sampler.endswith("always_off"):
        return Sampling(0.0, parent_based)
    return Sampling(1.0 if ratio is None else ratio, parent_based)


def propagators(options: Options) -> frozenset[str]:
    """The trace context formats read from callers (``tracecontext``, ``b3``,
    ``b3multi``); empty for ``none``. ``baggage`` passes through untouched anyway."""
    names = {name.strip().lower() for name in options.otel_propagators if name.strip()}
    if not names:
        return DEFAULT_PROPAGATORS
    if "none" in names:
        return frozenset()
    return frozenset(names & DEFAULT_PROPAGATORS)


def resource_attributes(options: Options) -> dict[str, str]:
    from gateway import __version__

    attributes = {"service.name": options.service_label, "service.version": __version__}
    attributes.update((key.strip(), unquote(value).strip())
                      for key, value in options.otel_resource_attributes.items())
    if options.otel_service_name:
        attributes["service.name"] = options.otel_service_name
    return attributes


def problems(options: Options) -> list[tuple[str, str, bool]]:
    """(key, message, is_error) of settings that cannot work as written."""
    out: list[tuple[str, str, bool]] = []
    for key in ("otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint"):
        url = getattr(options, key)
        if url and urlsplit(url).scheme not in ("http", "https"):
            out.append((key, f"{url}: OTLP is sent over http or https (write the scheme, "
                             "e.g. http://collector:4318)", True))
    if options.otel_traces_sampler_arg.strip() and sampler_ratio(options) is None:
        out.append(("otel_traces_sampler_arg",
                    f"{options.otel_traces_sampler_arg!r} is not a ratio from 0 to 1", True))
    elif options.otel_traces_sampler_arg.strip() and options.otel_traces_sampler and \
            options.otel_traces_sampler not in RATIO_SAMPLERS:
        out.append(("otel_traces_sampler_arg",
                    f"ignored: otel_traces_sampler {options.otel_traces_sampler} takes no "
                    "ratio", False))
    unknown = sorted({n.strip().lower() for n in options.otel_propagators} - PROPAGATORS
                     - {""})
    if unknown:
        out.append(("otel_propagators", f"unknown {', '.join(unknown)}; the gateway reads "
                                        "tracecontext, b3, b3multi (baggage passes through; "
                                        "none: no caller context)", True))
    if bool(options.otel_exporter_otlp_client_certificate) != \
            bool(options.otel_exporter_otlp_client_key):
        out.append(("otel_exporter_otlp_client_key",
                    "otel_exporter_otlp_client_certificate and otel_exporter_otlp_client_key "
                    "go together", True))
    for key in ("otel_exporter_otlp_certificate", "otel_exporter_otlp_client_certificate",
                "otel_exporter_otlp_client_key"):
        path = getattr(options, key)
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                out.append((key, f"{path}: {exc.strerror or exc}", True))
    if options.otel_metric_export_interval < 1000 and metrics_over_otlp(options):
        out.append(("otel_metric_export_interval", "must be at least 1000 (milliseconds)",
                    True))
    if options.otel_exporter_otlp_timeout == 0:
        out.append(("otel_exporter_otlp_timeout", "must be more than 0 (milliseconds)", True))
    return out
