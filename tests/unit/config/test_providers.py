"""``identity_providers``: entries parsed into values, every mistake named by its key path
and index, and the single-provider ``idp_*`` settings as the implicit provider ``default``."""

from __future__ import annotations

import io
import tempfile
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.cli.check import run_check
from gateway.config.providers import IMPLICIT_ID, BearerRules, accepted_by_default

from .helpers import IDENTITY, base_config, errors_of, load, write

PROTECTED = {"from": "https://app.example.com", "to": "http://127.0.0.1:9000",
             "allow_any_authenticated_user": True}
AUTH = {"authenticate_service_url": "https://authenticate.example.com"}


def corp(**changes: Any) -> dict[str, Any]:
    return {"id": "corp", "issuer": "https://login.example.com", "client_id": "gateway",
            "client_secret": "s3cret", **changes}


def config(*providers: Any, **extra: Any) -> dict[str, Any]:
    return base_config(**{**AUTH, "policy": [PROTECTED], "identity_providers": list(providers),
                          **extra})


class ParseTests(SynchronousTestCase):
    def test_the_issue_example(self) -> None:
        """The issue's four kinds of entry, with secrets in files."""
        directory = tempfile.mkdtemp(prefix="gw-providers-")
        write(directory, "corp.secret", "corp-secret\n")
        write(directory, "partners.secret", "partners-secret")
        write(directory, "cluster-jwks.json", '{"keys": []}')
        snapshot = load(config(
            {"id": "corp", "issuer": "https://login.example.com", "client_id": "gateway",
             "client_secret_file": "corp.secret",
             "scopes": ["openid", "email", "groups", "offline_access"]},
            {"id": "partners", "name": "Partner accounts",
             "issuer": "https://partners-idp.example.net/", "client_id": "gw",
             "client_secret_file": "partners.secret", "request_params": {"prompt": "login"}},
            {"id": "github-actions", "issuer": "https://token.actions.githubusercontent.com",
             "bearer": {"audiences": ["https://gateway.example.com"]}},
            {"id": "cluster", "issuer": "kubernetes:///", "jwks_file": "cluster-jwks.json",
             "bearer": {"audiences": ["gateway"], "groups_claim": "kubernetes.io/groups"}},
        ), directory=directory)
        providers = {p.id: p for p in snapshot.options.identity_providers}
        self.assertEqual(list(providers), ["corp", "partners", "github-actions", "cluster"])
        self.assertEqual(snapshot.material.provider_secrets,
                         {"corp": "corp-secret", "partners": "partners-secret"})
        self.assertEqual(providers["corp"].scopes, ("openid", "email", "groups", "offline_access"))
        self.assertEqual(providers["partners"].scopes, ("openid", "profile", "email",
                                                        "offline_access"))  # idp_scopes
        # as configured
        self.assertEqual(providers["partners"].issuer, "https://partners-idp.example.net/")
        self.assertEqual(providers["partners"].label, "Partner accounts")
        self.assertEqual(providers["corp"].label, "corp")
        self.assertEqual(dict(providers["partners"].request_params), {"prompt": "login"})
        self.assertEqual(providers["github-actions"].bearer,
                         BearerRules(("https://gateway.example.com",)))
        self.assertEqual(providers["cluster"].bearer,
                         BearerRules(("gateway",), "kubernetes.io/groups"))
        self.assertFalse(providers["cluster"].interactive)
        self.assertEqual(accepted_by_default(snapshot.options.identity_providers),
                         ("corp", "partners"))
        self.assertIn(f"{directory}/cluster-jwks.json", snapshot.files)

    def test_the_single_provider_settings_are_the_implicit_provider(self) -> None:
        snapshot = load(base_config(**IDENTITY, policy=[PROTECTED]))
        (only,) = snapshot.options.identity_providers
        self.assertEqual(only.id, IMPLICIT_ID)
        self.assertTrue(only.implicit and only.interactive)
        self.assertEqual((only.issuer, only.client_id), ("https://idp.example.com", "gateway"))

    def test_beside_explicit_providers_the_implicit_one_comes_first(self) -> None:
        snapshot = load(config(corp(), **IDENTITY))
        self.assertEqual([p.id for p in snapshot.options.identity_providers],
                         [IMPLICIT_ID, "corp"])

    def test_explicit_interactive_providers_need_no_idp_settings(self) -> None:
        self.assertEqual(len(load(config(corp())).options.identity_providers), 1)

    def test_ca_file_is_read(self) -> None:
        directory = tempfile.mkdtemp(prefix="gw-providers-")
        errors = errors_of(config(corp(ca_file="missing.pem")), directory=directory)
        self.assertTrue(any(e.startswith("identity_providers[0].ca_file:") for e in errors),
                        errors)


class ErrorTests(SynchronousTestCase):
    def assert_error(self, configuration: dict[str, Any], path: str, words: str) -> None:
        errors = errors_of(configuration)
        found = [e for e in errors if e.startswith(f"{path}: ")]
        self.assertTrue(found, f"no error at {path}: {errors}")
        self.assertTrue(any(words in e for e in found), found)

    def test_ids(self) -> None:
        self.assert_error(config(corp(), corp()), "identity_providers[1].id",
                          "'corp' is already the id of identity_providers[0]")
        for bad in ("Corp", "a b", "-x", "x/y", "a" * 65, "é"):
            self.assert_error(config(corp(id=bad)), "identity_providers[0].id", "lower-case")
        self.assert_error(config({"issuer": "https://a.example"}), "identity_providers[0].id",
                          "is required")

    def test_the_implicit_id_is_taken_while_idp_settings_are_set(self) -> None:
        self.assert_error(config(corp(id="default"), **IDENTITY), "identity_providers[0].id",
                          "'default' is the provider idp_provider_url describes")
        load(config(corp(id="default")))  # without idp_provider_url it is free

    def test_issuers(self) -> None:
        for bad in ("http://login.example.com", "login.example.com", "ftp://x.example",
                    "https://x.example/?a=b", ""):
            self.assert_error(config(corp(issuer=bad)), "identity_providers[0].issuer", "")
        for good in ("http://127.0.0.1:9000", "http://[::1]:9000", "http://localhost:8",
                     "https://x.example/tenant/v2.0"):
            load(config(corp(issuer=good)))
        self.assert_error(config(corp(issuer="kubernetes:///")),
                          "identity_providers[0].client_id", "cannot sign people in")

    def test_a_bearer_provider_needs_audiences(self) -> None:
        bearer = {"id": "ci", "issuer": "https://token.actions.githubusercontent.com"}
        for rules in ({}, {"audiences": []}, {"audiences": [""]}):
            self.assert_error(config(corp(), {**bearer, "bearer": rules}),
                              "identity_providers[1].bearer.audiences",
                              "no audience never means any")
        self.assert_error(config(corp(), {**bearer, "bearer": {"audiences": ["x"],
                                                               "audience": "y"}}),
                          "identity_providers[1].bearer.audience", "did you mean")

    def test_neither_interactive_nor_bearer(self) -> None:
        self.assert_error(config(corp(), {"id": "x", "issuer": "https://x.example"}),
                          "identity_providers[1]", "neither interactive")

    def test_secrets(self) -> None:
        self.assert_error(config(corp(client_secret="")),
                          "identity_providers[0].client_secret_file", "needs client_secret_file")
        self.assert_error(config(corp(client_secret_file="x")),
                          "identity_providers[0].client_secret_file", "not both")
        self.assert_error(config(corp(client_secret="", client_secret_file="nope.txt")),
                          "identity_providers[0].client_secret_file", "cannot read")

    def test_shapes(self) -> None:
        self.assert_error(config(corp(scopes=["email"])), "identity_providers[0].scopes",
                          "must include openid")
        self.assert_error(config(corp(clientid="x")), "identity_providers[0].clientid",
                          "did you mean")
        self.assert_error(base_config(**AUTH, identity_providers={"id": "x"}),
                          "identity_providers", "must be a list")
        self.assert_error(config("corp"), "identity_providers[0]", "must be a mapping")
        self.assert_error(config(corp(name="x\ny")), "identity_providers[0].name", "control")


class RouteTests(SynchronousTestCase):
    def test_a_route_names_known_providers(self) -> None:
        bearer = {"id": "ci", "issuer": "https://token.actions.githubusercontent.com",
                  "bearer": {"audiences": ["https://gw.example"]}}
        route = {**PROTECTED, "identity_providers": ["corp", "ci"], "pass_bearer_token": True}
        snapshot = load(config(corp(), bearer, policy=[route]))
        (loaded,) = snapshot.routes
        self.assertEqual(loaded.identity_providers, ("corp", "ci"))
        self.assertTrue(loaded.pass_bearer_token)
        self.assertFalse(load(config(corp())).routes[0].pass_bearer_token)  # the default

    def test_an_unknown_id_names_the_route(self) -> None:
        route = {**PROTECTED, "identity_providers": ["corp", "nope"]}
        errors = errors_of(config(corp(), policy=[route]))
        self.assertIn("policy[0].identity_providers[1]: no identity provider has the id "
                      "'nope' (known: corp)", errors)
        errors = errors_of(base_config(**IDENTITY, policy=[route]))
        self.assertIn("policy[0].identity_providers[0]: no identity provider has the id "
                      "'corp' (known: default)", errors)

    def test_gateway_check_prints_each_problem_at_its_place(self) -> None:
        directory = tempfile.mkdtemp(prefix="gw-providers-")
        path = write(directory, "gateway.yaml", yaml.safe_dump(config(
            corp(), {"id": "ci", "issuer": "http://ci.example", "bearer": {}},
            policy=[{**PROTECTED, "identity_providers": ["partners"]}])))
        out, err = io.StringIO(), io.StringIO()
        self.assertEqual(run_check(path, out, err), 1)
        text = err.getvalue()
        for expected in ("identity_providers[1].issuer: 'http://ci.example' must be an "
                         "https URL", "identity_providers[1].bearer.audiences: at least one "
                         "audience is required",
                         "policy[0].identity_providers[0]: no identity provider has the id "
                         "'partners'"):
            self.assertIn(expected, text)

    def test_gateway_check_lists_what_each_route_accepts(self) -> None:
        directory = tempfile.mkdtemp(prefix="gw-providers-")
        bearer = {"id": "ci", "issuer": "https://token.actions.githubusercontent.com",
                  "bearer": {"audiences": ["https://gw.example"]}}
        path = write(directory, "gateway.yaml", yaml.safe_dump(config(corp(), bearer, policy=[
            {**PROTECTED, "identity_providers": ["ci", "corp"]},
            {**PROTECTED, "from": "https://wiki.example.com"},
            {**PROTECTED, "from": "https://ci.example.com", "identity_providers": ["ci"]},
            {"from": "https://open.example.com", "to": "http://127.0.0.1:9",
             "allow_public_unauthenticated_access": True}])))
        out, err = io.StringIO(), io.StringIO()
        self.assertEqual(run_check(path, out, err), 0, err.getvalue())
        self.assertEqual(out.getvalue().splitlines()[1:], [
            "policy[0] https://app.example.com: accepts corp, ci (bearer)",
            "policy[1] https://wiki.example.com: accepts corp",
            "policy[2] https://ci.example.com: accepts ci (bearer)"])
        # with the idp_* settings alone, every route accepts their provider: no lines
        single = write(directory, "single.yaml", yaml.safe_dump(base_config(
            **IDENTITY, policy=[PROTECTED])))
        out = io.StringIO()
        self.assertEqual(run_check(single, out, err), 0)
        self.assertEqual(len(out.getvalue().splitlines()), 1)

    def test_a_file_problem_names_the_entrys_own_index(self) -> None:
        """An entry left out for its own problems does not shift the others' indices."""
        errors = errors_of(config({"id": "Bad", "issuer": "https://x.example"},
                                  corp(client_secret="", client_secret_file="nope.txt")))
        self.assertTrue(any(e.startswith("identity_providers[1].client_secret_file: cannot "
                                         "read") for e in errors), errors)
