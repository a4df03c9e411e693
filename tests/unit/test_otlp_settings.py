"""config/otel.py: the otel_* settings resolved by the OpenTelemetry specification's
rules, each read from its OTEL_* variable (which wins over the file), and the problems
validation names."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.config import ConfigErrors, load_snapshot
from gateway.config.otel import (
    DEFAULT_PROPAGATORS,
    Sampling,
    propagators,
    resource_attributes,
    sampling,
    target,
    tracing_provider,
)
from gateway.config.settings import Options

BASE = {"insecure_server": True, "address": "127.0.0.1:8080"}


class Loaded(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def options(self, file: dict[str, Any], env: dict[str, str] | None = None) -> Options:
        path = os.path.join(self.dir, "gateway.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({**BASE, **file}, f)
        return load_snapshot(path, env or {}).options

    def problems(self, file: dict[str, Any], env: dict[str, str] | None = None
                 ) -> dict[str, str]:
        with self.assertRaises(ConfigErrors) as caught:
            self.options(file, env)
        return {p.path: str(p) for p in caught.exception.problems}


class TargetTests(Loaded):
    def test_defaults(self) -> None:
        t = target(self.options({}), "traces")
        self.assertEqual((t.protocol, t.endpoint, t.timeout, t.headers),
                         ("http/protobuf", "http://localhost:4318/v1/traces", 10.0, ()))
        self.assertEqual(target(self.options({"otel_exporter_otlp_protocol": "grpc"}),
                                "metrics").endpoint, "http://localhost:4317")

    def test_signal_paths_appended_to_the_base_only(self) -> None:
        o = self.options({"otel_exporter_otlp_endpoint": "https://c.example:4318/otlp/",
                          "otel_exporter_otlp_traces_endpoint": "https://t.example/x"})
        self.assertEqual(target(o, "traces").endpoint, "https://t.example/x")
        self.assertEqual(target(o, "metrics").endpoint, "https://c.example:4318/otlp/v1/metrics")
        self.assertEqual(target(o, "logs").endpoint, "https://c.example:4318/otlp/v1/logs")
        self.assertFalse(target(o, "logs").insecure)

    def test_traces_overrides(self) -> None:
        o = self.options({"otel_exporter_otlp_headers": {"a": "1"},
                          "otel_exporter_otlp_traces_headers": {"b": "2%2C3"},
                          "otel_exporter_otlp_traces_protocol": "grpc",
                          "otel_exporter_otlp_traces_timeout": 2500})
        traces, logs = target(o, "traces"), target(o, "logs")
        self.assertEqual((traces.protocol, traces.headers, traces.timeout),
                         ("grpc", (("b", "2,3"),), 2.5))
        self.assertEqual((logs.protocol, logs.headers, logs.timeout),
                         ("http/protobuf", (("a", "1"),), 10.0))

    def test_environment_wins_over_the_file(self) -> None:
        o = self.options({"otel_exporter_otlp_endpoint": "http://file:4318",
                          "otel_exporter_otlp_headers": {"k": "file"},
                          "otel_exporter_otlp_timeout": 1000},
                         {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318",
                          "OTEL_EXPORTER_OTLP_HEADERS": "k=env,api-key=a%3Db",
                          "OTEL_EXPORTER_OTLP_TIMEOUT": "3000"})
        t = target(o, "traces")
        self.assertEqual((t.endpoint, t.headers, t.timeout), (
            "http://env:4318/v1/traces", (("k", "env"), ("api-key", "a=b")), 3.0))


class TracingTests(Loaded):
    def test_provider(self) -> None:
        self.assertEqual(tracing_provider(self.options({})), "")
        self.assertEqual(tracing_provider(self.options(
            {"tracing_provider": "httptrace", "tracing_httptrace_endpoint": "http://z/"},
            {"OTEL_TRACES_EXPORTER": "otlp"})), "otlp")
        self.assertEqual(tracing_provider(self.options(
            {"tracing_provider": "otlp"}, {"OTEL_TRACES_EXPORTER": "none"})), "")
        self.assertEqual(tracing_provider(self.options(
            {"tracing_provider": "otlp"}, {"OTEL_SDK_DISABLED": "true"})), "")

    def test_sampling(self) -> None:
        self.assertEqual(sampling(self.options({"tracing_sample_rate": 0.5})),
                         Sampling(0.5, True))
        self.assertEqual(sampling(self.options({"tracing_sample_rate": 0.5},
                                               {"OTEL_TRACES_SAMPLER_ARG": "0.25"})),
                         Sampling(0.25, True))
        self.assertEqual(sampling(self.options({}, {"OTEL_TRACES_SAMPLER": "always_on"})),
                         Sampling(1.0, False))
        self.assertEqual(sampling(self.options({}, {
            "OTEL_TRACES_SAMPLER": "parentbased_always_off"})), Sampling(0.0, True))
        self.assertEqual(sampling(self.options({}, {
            "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"})),
            Sampling(0.1, False))
        self.assertEqual(sampling(self.options({}, {
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio"})), Sampling(1.0, True))

    def test_propagators(self) -> None:
        self.assertEqual(propagators(self.options({})), DEFAULT_PROPAGATORS)
        read = propagators(self.options({}, {"OTEL_PROPAGATORS": "tracecontext,baggage"}))
        self.assertEqual(read, frozenset({"tracecontext"}))
        self.assertEqual(propagators(self.options({}, {"OTEL_PROPAGATORS": "none"})),
                         frozenset())

    def test_resource(self) -> None:
        o = self.options({"otel_resource_attributes": {"service.name": "r", "team": "edge"}})
        self.assertEqual((resource_attributes(o)["service.name"], resource_attributes(o)["team"]),
                         ("r", "edge"))
        o = self.options({"otel_resource_attributes": {"service.name": "r"}},
                         {"OTEL_SERVICE_NAME": "s"})
        self.assertEqual(resource_attributes(o)["service.name"], "s")
        self.assertEqual(resource_attributes(self.options({}))["service.name"], "gateway")


class ProblemTests(Loaded):
    def test_bad_values_named(self) -> None:
        problems = self.problems({"otel_exporter_otlp_endpoint": "collector:4317",
                                  "otel_traces_sampler_arg": "half",
                                  "otel_propagators": ["tracecontext", "xray"],
                                  "otel_exporter_otlp_client_certificate": "/nonexistent.pem",
                                  "otel_exporter_otlp_timeout": 0})
        self.assertIn("otel_exporter_otlp_endpoint", problems)
        self.assertIn("not a ratio", problems["otel_traces_sampler_arg"])
        self.assertIn("xray", problems["otel_propagators"])
        self.assertIn("go together", problems["otel_exporter_otlp_client_key"])
        self.assertIn("/nonexistent.pem", problems["otel_exporter_otlp_client_certificate"])
        self.assertIn("otel_exporter_otlp_timeout", problems)

    def test_bad_protocol_from_the_environment(self) -> None:
        problems = self.problems({}, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
        self.assertIn("otel_exporter_otlp_protocol", problems)

    def test_ratio_with_a_sampler_that_takes_none_is_a_warning(self) -> None:
        path = os.path.join(self.dir, "gateway.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({**BASE, "otel_traces_sampler": "always_on",
                            "otel_traces_sampler_arg": "0.5"}, f)
        warnings = [str(w) for w in load_snapshot(path, {}).warnings]
        self.assertTrue(any("otel_traces_sampler_arg" in w for w in warnings), warnings)
