"""Configuration sources: file formats, environment precedence, env-only forms."""

from __future__ import annotations

import base64
import json
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from gateway.config import ConfigErrors, load_snapshot
from gateway.config.settings import DEFAULT_RESPONSE_HEADERS

from .helpers import IDENTITY, SECRET, base_config, errors_of, load, write

SAME_CONFIG = {
    "yaml": "insecure_server: true\ncookie_name: _x\ntimeout_idle: 1h45m\n",
    "json": '{"insecure_server": true, "cookie_name": "_x", "timeout_idle": "1h45m"}',
    "toml": 'insecure_server = true\ncookie_name = "_x"\ntimeout_idle = "1h45m"\n',
    "properties": "insecure_server=true\ncookie_name=_x\ntimeout_idle=1h45m\n",
}


class FileFormatTests(SynchronousTestCase):
    def test_every_format_gives_the_same_options(self) -> None:
        """YAML, JSON, TOML and properties files are chosen by extension and agree."""
        directory = tempfile.mkdtemp()
        for ext, text in [*SAME_CONFIG.items(), ("yml", SAME_CONFIG["yaml"])]:
            snapshot = load_snapshot(write(directory, f"c.{ext}", text), {})
            self.assertTrue(snapshot.options.insecure_server, ext)
            self.assertEqual(snapshot.options.cookie_name, "_x", ext)
            self.assertEqual(snapshot.options.timeout_idle, 6300.0, ext)

    def test_properties_policy_is_base64(self) -> None:
        """A properties file carries the policy as base64, like the POLICY variable."""
        policy = base64.b64encode(json.dumps([{
            "from": "https://a.example", "to": "http://b",
            "allow_public_unauthenticated_access": True,
        }]).encode()).decode()
        path = write(tempfile.mkdtemp(), "c.properties", f"insecure_server=true\npolicy={policy}\n")
        self.assertEqual(load_snapshot(path, {}).routes[0].host, "a.example")

    def test_unknown_extension_and_parse_errors(self) -> None:
        """An unknown extension or unparsable content is an error naming the file."""
        directory = tempfile.mkdtemp()
        for name, text, expected in (
            ("c.ini", "x=1", "unsupported config file extension '.ini'"),
            ("c.yaml", "a: [", "cannot parse"),
            ("c.json", "{", "cannot parse"),
            ("c.toml", "a = ", "cannot parse"),
            ("c.yaml", "- a\n- b\n", "must hold a mapping"),
        ):
            path = write(directory, name, text)
            with self.assertRaises(ConfigErrors, msg=name) as caught:
                load_snapshot(path, {})
            self.assertIn(expected, caught.exception.render())
            self.assertIn(path, caught.exception.render())

    def test_deep_nesting_and_odd_keys(self) -> None:
        """Found by fuzzing: lists nested thousands deep (every format, and YAML inside a
        string value), a route key that is no string and a file name with a NUL raised
        RecursionError, TypeError or ValueError; they are problems like any other."""
        directory = tempfile.mkdtemp()
        deep = "[" * 5000 + "]" * 5000
        for name, text, expected in (
            ("c.yaml", f"policy: {deep}", "nest"),
            ("c.json", f'{{"policy": {deep}}}', "nest"),
            ("c.toml", f"policy = {deep}", "nest"),
            ("c.yaml", f"idp_scopes: '{deep}'", "idp_scopes"),
            ("c.yaml", "policy:\n- {1: a, from: 'http://a.test', to: 'http://127.0.0.1:1'}\n",
             "invalid configuration"),
            ("c.yaml", "databroker_storage_cert_file: \"a\\0b\"\n", "NUL character"),
            ("c.json", '{"shared_secret_file": "x\\u0000"}', "NUL character"),
        ):
            path = write(directory, name, text)
            with self.assertRaises(ConfigErrors, msg=name) as caught:
                load_snapshot(path, {})
            self.assertIn(expected, caught.exception.render(), name)

    def test_missing_file(self) -> None:
        """A missing config file is reported, not a traceback."""
        with self.assertRaises(ConfigErrors) as caught:
            load_snapshot("/nonexistent/gateway.yaml", {})
        self.assertIn("cannot read config file /nonexistent/gateway.yaml", str(caught.exception))


class EnvironmentTests(SynchronousTestCase):
    def test_env_beats_file_beats_default(self) -> None:
        """Environment variables win over the file, which wins over defaults."""
        snapshot = load(base_config(cookie_name="_file", timeout_read="10s"),
                        {"COOKIE_NAME": "_env"})
        self.assertEqual(snapshot.options.cookie_name, "_env")
        self.assertEqual(snapshot.options.timeout_read, 10.0)
        self.assertEqual(snapshot.options.timeout_write, 0.0)

    def test_env_names(self) -> None:
        """Env names are the uppercase key, except GATEWAY_DEBUG; empty counts as unset."""
        snapshot = load(base_config(), {"GATEWAY_DEBUG": "true", "LOG_LEVEL": "warn",
                                        "COOKIE_DOMAIN": "", "IDP_SCOPES": "openid,email"})
        self.assertTrue(snapshot.options.gateway_debug)
        self.assertEqual(snapshot.options.log_level, "warn")
        self.assertEqual(snapshot.options.cookie_domain, "")
        self.assertEqual(snapshot.options.idp_scopes, ("openid", "email"))

    def test_file_only_settings_ignore_env(self) -> None:
        """`certificates` and `programmatic_redirect_domain_whitelist` are file only."""
        snapshot = load(base_config(), {"PROGRAMMATIC_REDIRECT_DOMAIN_WHITELIST": "evil.example",
                                        "CERTIFICATES": "x"})
        self.assertEqual(snapshot.options.programmatic_redirect_domain_whitelist, ("localhost",))
        self.assertEqual(snapshot.options.certificates, ())

    def test_policy_env(self) -> None:
        """POLICY is base64 of a YAML route list (the original's test vector)."""
        policy = ("LSBmcm9tOiBodHRwczovL2h0dHBiaW4ubG9jYWxob3N0LnBvbWVyaXVtLmlvCiAgdG86IAogICAg"
                  "LSBodHRwOi8vbG9jYWxob3N0OjgwODEsMQo=")
        snapshot = load({"insecure_server": True, **IDENTITY}, {"POLICY": policy})
        self.assertEqual(len(snapshot.routes), 1)
        self.assertEqual(snapshot.routes[0].to[0].url, "http://localhost:8081")
        self.assertEqual(snapshot.routes[0].to[0].weight, 1)

    def test_policy_env_errors(self) -> None:
        """Bad base64 or a non-list POLICY is reported under POLICY."""
        self.assertTrue(any(e.startswith("POLICY: config: base64 decoding policy data")
                            for e in errors_of({"insecure_server": True}, {"POLICY": "!!"})))
        not_list = base64.b64encode(b"from: x").decode()
        self.assertIn("POLICY: config: base64 policy data must be a list of routes",
                      errors_of({"insecure_server": True}, {"POLICY": not_list}))

    def test_set_response_headers_env_forms(self) -> None:
        """Name:value pairs, JSON and YAML all give the same header map."""
        expected = {"X-Custom-1": "foo", "X-Custom-2": "bar"}
        for value in ('{"X-Custom-1":"foo", "X-Custom-2":"bar"}', "X-Custom-1:foo,X-Custom-2:bar",
                      "X-Custom-1: foo\nX-Custom-2: bar"):
            snapshot = load(base_config(), {"SET_RESPONSE_HEADERS": value})
            self.assertEqual(dict(snapshot.options.set_response_headers), expected, value)

    def test_bad_header_env(self) -> None:
        """Malformed header maps name the setting and the value."""
        for value in ("xyyyy", "X-Custom-1:foo,X-Custom-2bar"):
            errors = errors_of(base_config(), {"SET_RESPONSE_HEADERS": value})
            self.assertEqual(
                errors,
                [f"set_response_headers: config: failed to parse headers: failed to decode "
                 f"headers from '{value}'"],
            )

    def test_disable_headers(self) -> None:
        """`disable: true` turns every global response header off, in file and env."""
        self.assertEqual(dict(load(base_config(set_response_headers={"disable": "true"}))
                              .options.set_response_headers), {})
        self.assertEqual(dict(load(base_config(), {"SET_RESPONSE_HEADERS": "disable:true"})
                              .options.set_response_headers), {})
        kept = load(base_config(set_response_headers={"disable": False, "X-A": "1"}))
        self.assertEqual(dict(kept.options.set_response_headers), {"X-A": "1"})

    def test_default_headers(self) -> None:
        """Without the setting, the reference's four security headers apply."""
        headers = dict(load(base_config()).options.set_response_headers)
        self.assertEqual(headers, DEFAULT_RESPONSE_HEADERS)
        self.assertEqual(headers["X-Content-Type-Options"], "nosniff")

    def test_claim_headers_forms(self) -> None:
        """jwt_claims_headers: list -> X-Gateway-Claim-<Name>; map -> custom names."""
        listed = load(base_config(jwt_claims_headers=["email", "groups", "given-name"]))
        self.assertEqual(dict(listed.options.jwt_claims_headers), {
            "X-Gateway-Claim-Email": "email", "X-Gateway-Claim-Groups": "groups",
            "X-Gateway-Claim-Given-Name": "given-name"})
        mapped = load(base_config(jwt_claims_headers={"X-Email": "email"}))
        self.assertEqual(dict(mapped.options.jwt_claims_headers), {"X-Email": "email"})
        from_env = load(base_config(), {"JWT_CLAIMS_HEADERS": "email,user"})
        self.assertEqual(set(from_env.options.jwt_claims_headers.values()), {"email", "user"})
        env_map = load(base_config(), {"JWT_CLAIMS_HEADERS": '{"X-U": "user"}'})
        self.assertEqual(dict(env_map.options.jwt_claims_headers), {"X-U": "user"})

    def test_secrets_never_echoed(self) -> None:
        """A wrong secret is reported without printing its value."""
        errors = errors_of(base_config(shared_secret="c2VjcmV0"))
        self.assertEqual(errors, ["shared_secret: cryptutil: got 6 bytes but want 32"])
        self.assertNotIn("c2VjcmV0", " ".join(errors))

    def test_secret_from_file(self) -> None:
        """`shared_secret_file`/`cookie_secret_file` read the key from a file."""
        directory = tempfile.mkdtemp()
        write(directory, "shared", SECRET + "\n")
        snapshot = load(base_config(shared_secret_file="shared"), directory=directory)
        self.assertEqual(snapshot.material.shared_secret, b"k" * 32)
        self.assertIn(f"{directory}/shared", snapshot.files)
