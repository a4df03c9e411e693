"""Global settings: defaults, derived values and cross-setting rules."""

from __future__ import annotations

import base64
import tempfile

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.settings import SETTINGS, Options

from .helpers import IDENTITY, SECRET, base_config, errors_of, load, write


class DefaultTests(SynchronousTestCase):
    def test_reference_defaults(self) -> None:
        """Unset settings take the reference's defaults (case 26 and the tables)."""
        o = load(base_config()).options
        expected = {
            "address": ":443", "cookie_name": "_gateway", "cookie_secure": True,
            "cookie_http_only": True, "cookie_expire": 14 * 3600.0, "timeout_read": 30.0,
            "timeout_write": 0.0, "timeout_idle": 300.0, "grpc_client_timeout": 10.0,
            "grpc_client_dns_roundrobin": True, "grpc_server_max_connection_age": 300.0,
            "grpc_server_max_connection_age_grace": 300.0, "dns_lookup_family": "AUTO",
            "services": "all", "authenticate_callback_path": "/oauth2/callback",
            "idp_scopes": ("openid", "profile", "email", "offline_access"),
            "idp_refresh_directory_interval": 600.0, "idp_refresh_directory_timeout": 60.0,
            "default_upstream_timeout": 30.0, "refresh_cooldown": 300.0,
            "skip_xff_append": False, "xff_num_trusted_hops": 0,
            "programmatic_redirect_domain_whitelist": ("localhost",),
            "databroker_storage_type": "memory", "signing_key_algorithm": "ES256",
            "tracing_sample_rate": 0.0001, "tracing_agenttrace_address": "localhost:8126",
            "log_level": "info", "gateway_debug": False,
        }
        for key, value in expected.items():
            self.assertEqual(getattr(o, key), value, key)

    def test_all_in_one_derivations(self) -> None:
        """All-in-one mode: gRPC on :5443 insecure, codec http1, loopback service URLs."""
        o = load(base_config()).options
        self.assertEqual((o.grpc_address, o.grpc_insecure, o.codec_type),
                         (":5443", True, "http1"))
        self.assertEqual(o.authorize_service_urls, ("http://localhost:5443",))
        self.assertEqual(o.databroker_service_urls, ("http://localhost:5443",))
        self.assertEqual(o.proxy_log_level, "info")

    def test_split_mode_derivations(self) -> None:
        """A split service: gRPC on :443, secure, codec auto, no inferred URLs."""
        o = load(base_config(services="proxy", shared_secret=SECRET, cookie_secret=SECRET,
                             authenticate_service_url="https://authenticate.example.com")
                 ).options
        self.assertEqual((o.grpc_address, o.grpc_insecure, o.codec_type),
                         (":443", False, "auto"))
        self.assertEqual(o.authorize_service_urls, ())

    def test_proxy_log_level_follows_log_level(self) -> None:
        """proxy_log_level defaults to log_level, and can differ from it."""
        self.assertEqual(load(base_config(log_level="error")).options.proxy_log_level, "error")
        o = load(base_config(log_level="error", proxy_log_level="debug")).options
        self.assertEqual((o.log_level, o.proxy_log_level), ("error", "debug"))

    def test_schema_covers_every_field(self) -> None:
        """Every Options field has schema metadata and an env name unless file only."""
        self.assertEqual(len(SETTINGS), len(Options.__dataclass_fields__))
        self.assertIsNone(SETTINGS["certificates"].env)
        self.assertEqual(SETTINGS["gateway_debug"].env, "GATEWAY_DEBUG")
        self.assertEqual(SETTINGS["timeout_read"].env, "TIMEOUT_READ")


class RuleTests(SynchronousTestCase):
    def test_services_enum(self) -> None:
        """An unknown service gives the original message and the valid list (case 27)."""
        self.assertEqual(errors_of(base_config(services="blue")), [
            "services: config: blue is an invalid service type; valid values: all, "
            "authenticate, authorize, databroker, proxy"])

    def test_enums_are_case_insensitive(self) -> None:
        """Enums accept any case and store the canonical spelling; warning aliases warn."""
        o = load(base_config(log_level="WARNING", dns_lookup_family="v4_only")).options
        self.assertEqual((o.log_level, o.dns_lookup_family), ("warn", "V4_ONLY"))
        self.assertEqual(errors_of(base_config(dns_lookup_family="V5")), [
            "dns_lookup_family: config: unknown dns_lookup_family: V5, known families are: "
            "V6_ONLY, V4_ONLY, AUTO; valid values: V4_ONLY, V6_ONLY, AUTO"])

    def test_storage(self) -> None:
        """kvstore needs a connection string of a known form (case 29)."""
        self.assertEqual(errors_of(base_config(databroker_storage_type="kvstore",
                                               shared_secret=SECRET, cookie_secret=SECRET)), [
            "databroker_storage_connection_string: config: missing databroker storage backend "
            "dsn"])
        self.assertTrue(errors_of(base_config(databroker_storage_type="foo"))[0].startswith(
            "databroker_storage_type: config: unknown databroker storage backend type"))
        errors = errors_of(base_config(databroker_storage_type="kvstore", shared_secret=SECRET,
                                       databroker_storage_connection_string="redis://h:1"))
        self.assertIn("unsupported scheme 'redis'", errors[0])
        for dsn in ("kvstore://u:p@127.0.0.1:6379/0", "kvstores+sentinel://:p@h1:1,h2:2/m/1",
                    "kvstore+cluster://h1:1,h2:2/?read_only=true",
                    "kvstores+cluster://u:p@h1:1/"):
            load(base_config(databroker_storage_type="kvstore", shared_secret=SECRET,
                             cookie_secret=SECRET, databroker_storage_connection_string=dsn))
        self.assertIn("no database", errors_of(base_config(
            databroker_storage_type="kvstore", shared_secret=SECRET, cookie_secret=SECRET,
            databroker_storage_connection_string="kvstore+cluster://h1:1/2"))[0])

    def test_storage_tls_files(self) -> None:
        """The kvstore TLS files are loaded and checked up front, each error naming its
        key; they warn when the connection string is not a TLS one."""
        d = tempfile.mkdtemp()
        ca = trustme.CA()
        leaf, other = ca.issue_cert("gw.test"), ca.issue_cert("other.test")
        write(d, "ca.pem", ca.cert_pem.bytes())
        write(d, "c.pem", leaf.cert_chain_pems[0].bytes())
        write(d, "c.key", leaf.private_key_pem.bytes())
        write(d, "o.key", other.private_key_pem.bytes())
        write(d, "junk.pem", b"not pem")
        tls = dict(databroker_storage_type="kvstore", shared_secret=SECRET,
                   cookie_secret=SECRET,
                   databroker_storage_connection_string="kvstores://127.0.0.1:6380/0")
        snap = load(base_config(**tls, databroker_storage_ca_file="ca.pem",
                                databroker_storage_cert_file="c.pem",
                                databroker_storage_key_file="c.key"), directory=d)
        self.assertEqual(snap.material.storage_ca, ca.cert_pem.bytes())
        self.assertEqual(snap.material.storage_client_certificate,
                         (leaf.cert_chain_pems[0].bytes(), leaf.private_key_pem.bytes()))
        self.assertEqual(snap.warnings, ())
        self.assertEqual(errors_of(base_config(**tls, databroker_storage_cert_file="c.pem"),
                                   directory=d),
                         ["databroker_storage_key_file: databroker_storage_cert_file and "
                          "databroker_storage_key_file go together"])
        self.assertEqual(errors_of(base_config(**tls, databroker_storage_cert_file="c.pem",
                                               databroker_storage_key_file="o.key"),
                                   directory=d),
                         ["databroker_storage_key_file: does not match the certificate in "
                          "databroker_storage_cert_file"])
        [junk] = errors_of(base_config(**tls, databroker_storage_ca_file="junk.pem"),
                           directory=d)
        self.assertTrue(junk.startswith("databroker_storage_ca_file: config: "), junk)
        [missing] = errors_of(base_config(**tls, databroker_storage_ca_file="nope.pem"),
                              directory=d)
        self.assertIn("databroker_storage_ca_file: config: couldn't load certificate file",
                      missing)
        plain = {**tls, "databroker_storage_connection_string": "kvstore://127.0.0.1:6379/0"}
        warned = load(base_config(**plain, databroker_storage_ca_file="ca.pem"), directory=d)
        self.assertEqual([str(w) for w in warned.warnings], [
            "databroker_storage_ca_file: has no effect unless the connection string uses "
            "kvstores://, kvstores+sentinel:// or kvstores+cluster://"])

    def test_shared_secret_rules(self) -> None:
        """Secret required outside all-in-one memory mode (cases 28, 30, 32)."""
        self.assertIn("shared_secret: config: shared-key cannot be empty",
                      errors_of(base_config(services="authenticate", **IDENTITY))[0])
        self.assertIn("shared_secret: config: shared-key cannot be empty", errors_of(base_config(
            databroker_storage_type="kvstore",
            databroker_storage_connection_string="kvstore://127.0.0.1:6379/"))[0])
        snap = load(base_config())
        self.assertEqual(len(snap.material.shared_secret), 32)
        self.assertIn("shared_secret", snap.material.generated)
        self.assertEqual(load(base_config()).material.shared_secret, snap.material.shared_secret)
        self.assertEqual(errors_of(base_config(), {
            "SHARED_SECRET": "YixWi1MYh77NMECGGIJQevoonYtVF+ZPRkQZrrmeRqM=\n"}),
            ["shared_secret: config: shared-key contains whitespace"])

    def test_split_grpc_settings(self) -> None:
        """A databroker serves gRPC with TLS unless grpc_insecure; the proxy's
        databroker_service_url(s) must be http(s) URLs; each error names its key."""
        split = {"shared_secret": SECRET, "cookie_secret": SECRET, **IDENTITY}
        self.assertEqual(errors_of(base_config(services="databroker", **split)), [
            "grpc_insecure: is false (the default when services is not all) but no "
            "certificate is set to serve gRPC with TLS: set certificate_file and "
            "certificate_key_file (or certificates), autocert: true (the proxies' "
            "certificates in a shared autocert_dir), or grpc_insecure: true for plaintext "
            "gRPC on a trusted network"])
        load(base_config(services="databroker", autocert=True, **split))
        load(base_config(services="databroker", grpc_insecure=True,
                         grpc_address="127.0.0.1:5443", **split))
        self.assertEqual(errors_of(base_config(
            services="proxy", databroker_service_url="tcp://127.0.0.1:5443", **split)), [
            "databroker_service_url: 'tcp://127.0.0.1:5443' is not a gRPC service URL: use "
            "http://HOST:PORT (grpc_insecure on the databroker) or https://HOST:PORT"])
        snap = load(base_config(services="proxy", databroker_service_urls=[
            "http://127.0.0.1:5443", "https://127.0.0.1:5444"], **split))
        self.assertEqual(len(snap.options.databroker_service_urls), 2)
        self.assertEqual(snap.warnings, ())
        both = load(base_config(services="proxy", databroker_service_url="http://[::1]:5443",
                                databroker_storage_type="kvstore",
                                databroker_storage_connection_string="kvstore://127.0.0.1:6379/",
                                **split))
        self.assertEqual([str(w) for w in both.warnings], [
            "databroker_storage_type: is kvstore, but this process keeps its records in the "
            "databroker at databroker_service_url(s): the databroker_storage_* settings "
            "belong in the databroker's config and are ignored here"])

    def test_split_authorize_grpc_settings(self) -> None:
        """authorize serves gRPC as the databroker does (TLS unless grpc_insecure); a
        proxy's authorize_service_url(s) must be http(s) URLs."""
        split = {"shared_secret": SECRET, "cookie_secret": SECRET, **IDENTITY}
        errors = errors_of(base_config(services="authorize", **split))
        self.assertEqual(len(errors), 1)
        self.assertTrue(errors[0].startswith("grpc_insecure: is false"), errors)
        load(base_config(services="authorize", grpc_insecure=True, **split))
        self.assertEqual(errors_of(base_config(
            services="proxy", authorize_service_url="tcp://127.0.0.1:5443", **split)), [
            "authorize_service_url: 'tcp://127.0.0.1:5443' is not a gRPC service URL: use "
            "http://HOST:PORT (grpc_insecure on the authorize) or https://HOST:PORT"])
        snap = load(base_config(services="proxy", authorize_service_urls=[
            "http://127.0.0.1:5443", "https://127.0.0.1:5444"], **split))
        self.assertEqual(len(snap.options.authorize_service_urls), 2)

    def test_cookie_secret_length(self) -> None:
        """A 31-byte cookie secret is refused with the original's message (case 37)."""
        self.assertEqual(errors_of(base_config(
            cookie_secret="gN3xnvfsAwfCXxnJorGLKUG4l2wC8sS8nfLMhcStPg==")),
            ["cookie_secret: proxy: invalid 'COOKIE_SECRET': cryptutil: got 31 bytes but "
             "want 32"])

    def test_tls_source_required(self) -> None:
        """No certificates, no insecure_server and no autocert fails (case 34)."""
        config = base_config()
        del config["insecure_server"]
        self.assertEqual(errors_of(config), [
            "insecure_server: config: server must be run with `autocert`, `insecure_server` or "
            "manually provided certificates to start"])
        load(dict(config, autocert=True))

    def test_urls(self) -> None:
        """Service URLs need scheme and host (case 33)."""
        self.assertEqual(errors_of(base_config(), {
            "AUTHENTICATE_SERVICE_URL": "authenticate.example"}), [
            "authenticate_service_url: config: bad authenticate-url authenticate.example : "
            "authenticate.example url does not contain a valid scheme"])
        self.assertEqual(errors_of(base_config(), {"FORWARD_AUTH_URL": "databroker.example"}), [
            "forward_auth_url: config: bad forward-auth-url databroker.example : "
            "databroker.example url does not contain a valid scheme"])

    def test_identity_needed_only_for_protected_routes(self) -> None:
        """All-in-one with only public routes needs no IdP; a protected route does."""
        load(base_config())
        errors = errors_of(base_config(policy=[{"from": "https://a.example", "to": "http://b",
                                                "allowed_domains": ["example.com"]}]))
        self.assertEqual(errors, [
            f"{key}: is required (a route requires sign-in)" for key in (
                "authenticate_service_url", "idp_provider", "idp_client_id", "idp_provider_url",
                "idp_client_secret")])
        errors = errors_of(base_config(services="proxy", shared_secret=SECRET,
                                       cookie_secret=SECRET))
        self.assertEqual(errors, ["authenticate_service_url: is required (services is proxy)"])

    def test_groups_without_service_account_warn(self) -> None:
        """allowed_groups without idp_service_account warns naming the routes."""
        snap = load(base_config(policy=[{"from": "https://a.example", "to": "http://b",
                                         "allowed_groups": ["admins"]}], **IDENTITY))
        self.assertIn("idp_service_account: unset, but allowed_groups is used by policy[0]: "
                      "group-based rules never match without it", [str(w) for w in snap.warnings])

    def test_http_redirect_addr_quotes(self) -> None:
        """Surrounding quotes are stripped from addresses (case 36)."""
        self.assertEqual(load(base_config(http_redirect_addr='":80"')).options.http_redirect_addr,
                         ":80")

    def test_durations_need_units(self) -> None:
        """A bare number for a duration is refused with a hint; 0 is fine."""
        self.assertEqual(errors_of(base_config(timeout_read=30)), [
            "timeout_read: duration 30 has no unit; write it with one, e.g. 30s or 30m"])
        self.assertEqual(load(base_config(timeout_idle=0)).options.timeout_idle, 0.0)

    def test_unknown_keys_warn(self) -> None:
        """Unknown keys are warnings naming the key, with a suggestion."""
        warnings = [str(w) for w in load(base_config(cookie_secert="x")).warnings]
        self.assertIn("cookie_secert: unknown setting (ignored); did you mean 'cookie_secret'?",
                      warnings)

    def test_no_policy_warns(self) -> None:
        """Starting without a policy is allowed, with a warning."""
        warnings = [str(w) for w in load({"insecure_server": True}).warnings]
        self.assertTrue(any(w.startswith("policy: no policy configured") for w in warnings))

    def test_tracing(self) -> None:
        """Providers need their endpoints; the sample rate lies in 0-1."""
        self.assertEqual(errors_of(base_config(tracing_provider="httptrace")), [
            "tracing_httptrace_endpoint: is required when tracing_provider is httptrace"])
        self.assertEqual(errors_of(base_config(tracing_sample_rate=2)), [
            "tracing_sample_rate: must be between 0 and 1, got 2.0"])

    def test_tracing_providers(self) -> None:
        """thrifttrace needs its collector URL or its agent address (the error names
        both keys); an unknown provider names the valid ones; endpoints are http(s);
        agenttrace has a default address; tracing_debug is unsupported (a warning)."""
        (error,) = errors_of(base_config(tracing_provider="thrifttrace"))
        self.assertTrue(error.startswith("tracing_thrifttrace_collector_endpoint: "), error)
        self.assertIn("tracing_thrifttrace_agent_endpoint", error)
        for one in ({"tracing_thrifttrace_collector_endpoint":
                     "http://127.0.0.1:14268/api/traces"},
                    {"tracing_thrifttrace_agent_endpoint": "127.0.0.1:6831"}):
            self.assertEqual(load(base_config(tracing_provider="thrifttrace", **one)).warnings,
                             ())
        both = load(base_config(
            tracing_provider="thrifttrace", tracing_thrifttrace_agent_endpoint="127.0.0.1:6831",
            tracing_thrifttrace_collector_endpoint="http://127.0.0.1:14268/api/traces"))
        self.assertIn("tracing_thrifttrace_agent_endpoint: ignored: spans go to "
                      "tracing_thrifttrace_collector_endpoint",
                      [str(w) for w in both.warnings])
        (error,) = errors_of(base_config(tracing_provider="zipkin"))
        self.assertEqual(error, "tracing_provider: 'zipkin' is not valid; valid values: "
                                "agenttrace, thrifttrace, httptrace, otlp")
        self.assertEqual(errors_of(base_config(
            tracing_provider="httptrace", tracing_httptrace_endpoint="ftp://x/spans")),
            ["tracing_httptrace_endpoint: ftp://x/spans: spans are sent over http or https"])
        self.assertEqual(load(base_config(tracing_provider="agenttrace")).options
                         .tracing_agenttrace_address, "localhost:8126")
        warnings = [str(w) for w in load(base_config(tracing_debug=True)).warnings]
        self.assertIn("tracing_debug: unsupported (ignored): tracing_sample_rate decides "
                      "what is sampled", warnings)

    def test_metrics_basic_auth(self) -> None:
        """metrics_basic_auth must be base64 of user:password."""
        ok = load(base_config(metrics_basic_auth=base64.b64encode(b"u:p").decode()))
        self.assertEqual(ok.material.metrics_basic_auth, ("u", "p"))
        self.assertEqual(errors_of(base_config(metrics_basic_auth=base64.b64encode(
            b"nocolon").decode())), ["metrics_basic_auth: must be base64 of username:password"])


class BrowserUrlTests(SynchronousTestCase):
    def test_only_http_or_https(self) -> None:
        """URLs browsers are sent to must be http(s); the error names the setting and
        the value, and other URL settings keep their own rules."""
        for key, label in (("authenticate_service_url", "authenticate-url"),
                           ("signout_redirect_url", "signout-redirect-url"),
                           ("forward_auth_url", "forward-auth-url")):
            self.assertIn(
                f"{key}: config: bad {label} ftp://auth.example : ftp://auth.example url "
                "must use http or https",
                errors_of(base_config(**{key: "ftp://auth.example"})), key)
        load(base_config(**IDENTITY, signout_redirect_url="https://bye.example/",
                         forward_auth_url="http://fwd.example"))


class CertificateTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        ca = trustme.CA()
        self.leaf = ca.issue_cert("app.example.com")
        self.other = ca.issue_cert("other.example.com")
        write(self.dir, "cert.pem", b"".join(b.bytes() for b in self.leaf.cert_chain_pems))
        write(self.dir, "key.pem", self.leaf.private_key_pem.bytes())
        write(self.dir, "other-key.pem", self.other.private_key_pem.bytes())

    def test_certificate_pairs(self) -> None:
        """`certificates` pairs load, resolved against the config directory, and are watched."""
        config = base_config(certificates=[{"cert": "cert.pem", "key": "key.pem"}])
        del config["insecure_server"]
        snap = load(config, directory=self.dir)
        self.assertEqual(len(snap.material.certificates), 1)
        self.assertIn(f"{self.dir}/cert.pem", snap.files)

    def test_mismatched_and_half_pairs(self) -> None:
        """A key that does not match, or half a pair, is refused."""
        config = base_config(certificates=[{"cert": "cert.pem", "key": "other-key.pem"}])
        self.assertEqual(errors_of(config, directory=self.dir),
                         ["certificates[0]: the key does not match the certificate"])
        self.assertEqual(errors_of(base_config(certificate_file="cert.pem"), directory=self.dir),
                         ["certificate_key_file: `certificate_file` and `certificate_key_file` "
                          "must be set together"])

    def test_inline_certificate(self) -> None:
        """certificate/certificate_key take base64 PEM."""
        b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
        snap = load(base_config(
            certificate=b64(b"".join(b.bytes() for b in self.leaf.cert_chain_pems)),
            certificate_key=b64(self.leaf.private_key_pem.bytes())))
        self.assertEqual(len(snap.material.certificates), 1)

    def test_signing_key_algorithm(self) -> None:
        """The signing key must suit signing_key_algorithm."""
        p256 = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())
        load(base_config(signing_key=base64.b64encode(p256).decode()))
        ed = ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())
        errors = errors_of(base_config(signing_key=base64.b64encode(ed).decode()))
        self.assertTrue(errors[0].startswith("signing_key: the key does not suit "
                                             "signing_key_algorithm ES256"))
        load(base_config(signing_key=base64.b64encode(ed).decode(),
                         signing_key_algorithm="EdDSA"))


class SshSignInBoundsTests(SynchronousTestCase):
    def test_defaults_and_values(self) -> None:
        options = load(base_config()).options
        self.assertEqual((options.ssh_max_pending_sign_ins_per_address,
                          options.ssh_max_pending_sign_ins), (5, 250))
        options = load(base_config(ssh_max_pending_sign_ins_per_address=2,
                                   ssh_max_pending_sign_ins=40)).options
        self.assertEqual((options.ssh_max_pending_sign_ins_per_address,
                          options.ssh_max_pending_sign_ins), (2, 40))

    def test_zero_or_not_a_number_names_the_key(self) -> None:
        self.assertEqual(errors_of(base_config(ssh_max_pending_sign_ins_per_address=0)), [
            "ssh_max_pending_sign_ins_per_address: must be at least 1 (0 would refuse "
            "every SSH sign-in)"])
        self.assertEqual(errors_of(base_config(ssh_max_pending_sign_ins=0)), [
            "ssh_max_pending_sign_ins: must be at least 1 (0 would refuse every SSH "
            "sign-in)"])
        [bad] = errors_of(base_config(ssh_max_pending_sign_ins="many"))
        self.assertTrue(bad.startswith("ssh_max_pending_sign_ins: "), bad)

    def test_a_per_address_bound_above_the_total_warns(self) -> None:
        snap = load(base_config(ssh_max_pending_sign_ins_per_address=20,
                                ssh_max_pending_sign_ins=10))
        self.assertEqual([str(w) for w in snap.warnings], [
            "ssh_max_pending_sign_ins_per_address: is above ssh_max_pending_sign_ins (10), "
            "which bounds it"])
