"""``gateway policy check --token FILE --provider ID`` (issue 42): a real token verified
offline against a saved key set, every failed check explained (all of them, with what
the token says beside what was expected), and the identity it gives decided by the
route's policy like a signed-in person's."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
from types import SimpleNamespace
from typing import Any

import yaml

from gateway.cli.policy_inputs import InputError
from gateway.cli.policy_token import add_arguments, check_token
from tests.support.bearer_tokens import AUDIENCE, ISSUER, NOW, jwks_bytes, mint, rsa_key

from .config.helpers import IDENTITY, base_config, write
from .test_policy_check_cli import CliCase, allow, route

AT = dt.datetime.fromtimestamp(NOW, dt.UTC).isoformat().replace("+00:00", "Z")
ROUTES = [route("deploy.test", [allow({"claim/repository": "example/app"},
                                      {"claim/ref": "refs/heads/main"}, op="and")]),
          route("public.test", allow_public_unauthenticated_access=True)]


class TokenCli(CliCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="gw-token-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.path = write(self.directory, "config.yaml",
                          yaml.safe_dump(base_config(**{**IDENTITY, "policy": ROUTES})))
        self.jwks = write(self.directory, "jwks.json", jwks_bytes((rsa_key(), "rsa-1")))

    def token_file(self, text: str) -> str:
        return write(self.directory, "token.jwt", text + "\n")

    def run_token(self, token: str, *extra: str, url: str = "https://deploy.test/"
                  ) -> tuple[int, str, str]:
        return self.check(self.path, url, "--at", AT, "--token", self.token_file(token),
                          "--provider", "ci", "--jwks", self.jwks, "--issuer", ISSUER,
                          "--audience", "other", "--audience", AUDIENCE, *extra)

    def test_a_good_token_is_the_person(self) -> None:
        code, out, err = self.run_token(mint(groups=["deployers"]))
        self.assertEqual(code, 0, out + err)
        self.assertIn("token: provider ci, key set", out)
        self.assertIn("  ok     signature: signed with RS256", out)
        self.assertIn("token: verified", out)
        # the token's groups count (its provider's claim), with no directory configured
        self.assertIn("who: user repo:example/app:ref:refs/heads/main, provider ci, groups "
                      "deployers, claims", out)
        self.assertIn("decision: allowed", out)

    def test_another_ref_is_denied_by_the_policy(self) -> None:
        code, out, _ = self.run_token(mint(ref="refs/heads/feature"))
        self.assertEqual(code, 1)
        self.assertIn("token: verified", out)
        self.assertIn("decision: denied", out)

    def test_every_failed_check_explained(self) -> None:
        code, out, err = self.run_token(mint(iss="https://evil.example.test",
                                             aud="https://elsewhere.example.test",
                                             exp=int(NOW) - 3600))
        self.assertEqual(code, 1, err)
        failed = [line for line in out.splitlines() if "FAILED" in line]
        self.assertEqual([line.split(":")[0].split()[-1] for line in failed],
                         ["issuer", "audience", "expired"])
        self.assertIn("(the token says 'https://evil.example.test', expected "
                      f"'{ISSUER}')", out)
        self.assertIn("(the token says 'https://elsewhere.example.test', expected one of "
                      f"['other', '{AUDIENCE}'])", out)
        self.assertIn("(exp 2026-09-21T13:13:20Z, now 2026-09-21T14:13:20Z)", out)
        self.assertIn("token: refused, 3 check(s) failed: the gateway answers 401", out)
        self.assertIn("who: not signed in", out)
        self.assertIn("note: the token is refused", out)

    def test_unknown_kid_lists_the_key_set(self) -> None:
        code, out, _ = self.run_token(mint(kid="rotated-away"))
        self.assertEqual(code, 1)
        self.assertIn("FAILED unknown_kid: the key id (kid) is not one of provider ci's keys "
                      "(the token names 'rotated-away'; the key set has ['rsa-1'])", out)

    def test_json(self) -> None:
        code, out, err = self.run_token(mint(aud="x"), "--json")
        self.assertEqual(code, 1, err)
        document: dict[str, Any] = json.loads(out)
        self.assertEqual(document["token"]["verified"], False)
        self.assertEqual([c["check"] for c in document["token"]["checks"]
                          if not c["passed"]], ["audience"])
        self.assertEqual(document["identity"]["signed_in"], False)
        code, out, err = self.run_token(mint(), "--json")
        identity = json.loads(out)["identity"]
        self.assertEqual((code, identity["provider"], identity["groups_used"]), (0, "ci", True))

    def test_bearer_prefix_and_public_route(self) -> None:
        code, out, _ = self.run_token("Bearer " + mint(), url="https://public.test/")
        self.assertEqual(code, 0)
        self.assertIn("token: verified", out)

    def test_arguments_it_needs(self) -> None:
        code, _, err = self.check(self.path, "https://deploy.test/", "--token",
                                  self.token_file(mint()), "--provider", "ci")
        self.assertEqual(code, 2)
        self.assertIn("--token needs --jwks, --issuer, --audience (no identity_providers "
                      "entry has the id ci)", err)
        code, _, err = self.check(self.path, "https://deploy.test/", "--token",
                                  self.token_file(mint()))
        self.assertEqual(code, 2)
        self.assertIn("--token needs --provider ID", err)
        code, _, err = self.run_token(mint(), "--user", "alice")
        self.assertEqual(code, 2)
        self.assertIn("--token is the caller", err)
        code, _, err = self.check(self.path, "https://deploy.test/", "--jwks", self.jwks)
        self.assertEqual((code, "--jwks describes a bearer token" in err), (2, True))
        # without --token, --provider is the provider the person signed in through
        _code, _out, err = self.check(self.path, "https://deploy.test/", "--provider", "ci")
        self.assertNotIn("describes a bearer token", err)

    def test_a_key_set_that_is_not_one(self) -> None:
        self.jwks = write(self.directory, "jwks.json", b"<html>")
        code, _, err = self.run_token(mint())
        self.assertEqual(code, 2)
        self.assertIn("jwks.json: the key set is not JSON", err)


def namespace(**given: Any) -> argparse.Namespace:
    values: dict[str, Any] = {"token": None, "provider": None, "jwks": None, "issuer": None,
                              "audience": [], "groups_claim": None, "user": None,
                              "email": None, "groups": None, "claim": [], "at": AT,
                              "config": "/etc/gateway/config.yaml"}
    values.update(given)
    return argparse.Namespace(**values)


class FromConfiguration(CliCase):
    """With ``identity_providers`` in the configuration, ``--provider`` names the entry
    the issuer, audiences, key file, groups claim and e-mail rule come from; each flag
    overrides its setting. (Duck-typed: the entry's shape is the providers' values.)"""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="gw-token-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        write(self.directory, "ci-jwks.json", jwks_bytes((rsa_key(), "rsa-1")))
        self.token = write(self.directory, "t.jwt", mint(
            email="ci@example.test", roles=["deploy"]))
        rules = SimpleNamespace(audiences=(AUDIENCE,), groups_claim="roles",
                                allow_unverified_email=True)
        entry = SimpleNamespace(id="ci", issuer=ISSUER, jwks_file="ci-jwks.json",
                                bearer=rules)
        self.snapshot = SimpleNamespace(options=SimpleNamespace(identity_providers=(entry,)))
        self.config = f"{self.directory}/config.yaml"

    def test_the_entry_gives_the_settings(self) -> None:
        check = check_token(namespace(token=self.token, provider="ci", config=self.config),
                            self.snapshot)
        assert check is not None and check.verified is not None, check
        self.assertEqual((check.verified.groups, check.verified.email),
                         (("deploy",), "ci@example.test"))  # its groups claim, its rule
        self.assertEqual(check.jwks, f"{self.directory}/ci-jwks.json")  # as the daemon reads

    def test_flags_override(self) -> None:
        check = check_token(namespace(token=self.token, provider="ci", config=self.config,
                                      audience=["other"]), self.snapshot)
        assert check is not None
        self.assertEqual([o.check for o in check.outcomes if not o.passed], ["audience"])

    def test_kubernetes_needs_the_clusters_issuer(self) -> None:
        entry = self.snapshot.options.identity_providers[0]
        entry.issuer = "kubernetes:///"
        with self.assertRaises(InputError) as raised:
            check_token(namespace(token=self.token, provider="ci", config=self.config),
                        self.snapshot)
        self.assertIn("give the cluster's issuer with --issuer", str(raised.exception))

    def test_one_provider_flag_for_the_token_and_the_person(self) -> None:
        """One ``--provider`` flag, one meaning: the provider that vouches for the caller
        (the token's with ``--token``, else the one the person signed in through)."""
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        self.assertEqual(parser.parse_args(["--provider", "ci", "--token", "t"]).provider,
                         "ci")
        self.assertEqual(parser.parse_args(["--provider", "corp"]).provider, "corp")
        check = check_token(namespace(provider="ci", config=self.config), self.snapshot)
        self.assertIsNone(check)  # no --token: the person's provider, no bearer check


class WithIdentityProviders(CliCase):
    """The configuration's own bearer provider: ``--provider`` alone gives the issuer,
    audiences, key file (relative to the configuration) and groups claim."""

    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="gw-token-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        write(self.directory, "jwks.json", jwks_bytes((rsa_key(), "rsa-1")))
        providers = [{"id": "ci", "issuer": ISSUER, "jwks_file": "jwks.json",
                      "bearer": {"audiences": [AUDIENCE], "groups_claim": "roles"}}]
        self.path = write(self.directory, "config.yaml", yaml.safe_dump(base_config(
            **{**IDENTITY, "policy": ROUTES, "identity_providers": providers})))

    def token_file(self, text: str) -> str:
        return write(self.directory, "token.jwt", text + "\n")

    def test_the_provider_alone(self) -> None:
        code, out, err = self.check(self.path, "https://deploy.test/", "--at", AT, "--token",
                                    self.token_file(mint(roles=["deployers"])),
                                    "--provider", "ci")
        self.assertEqual(code, 0, out + err)
        self.assertIn(f"token: provider ci, key set {self.directory}/jwks.json", out)
        self.assertIn("provider ci, groups deployers", out)

    def test_its_audiences(self) -> None:
        code, out, _ = self.check(self.path, "https://deploy.test/", "--at", AT, "--token",
                                  self.token_file(mint(aud="other")), "--provider", "ci")
        self.assertEqual(code, 1)
        self.assertIn(f"expected one of ['{AUDIENCE}']", out)
