"""Connection strings of every kvstore form, and records encrypted at rest."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.kvstore_dsn import BadConnectionString, parse_dsn
from gateway.databroker.cipher import RecordCipher, RecordKeyError
from gateway.databroker.session_records import from_json, to_json
from gateway.sessions.model import Session


class DsnTests(SynchronousTestCase):
    def test_forms(self) -> None:
        """Standalone, sentinel and cluster, plain and TLS, with credentials and params."""
        s = parse_dsn("kvstore://user:p%40ss@127.0.0.1:6379/2")
        self.assertEqual((s.mode, s.tls, s.addresses, s.username, s.password, s.db),
                         ("standalone", False, (("127.0.0.1", 6379),), "user", "p@ss", 2))
        s = parse_dsn("kvstores+sentinel://:pw@h1:26379,h2:26380/mymaster/3?read_only=true")
        self.assertEqual((s.mode, s.tls, s.master_name, s.db, s.password, s.params),
                         ("sentinel", True, "mymaster", 3, "pw", {"read_only": "true"}))
        self.assertEqual(len(s.addresses), 2)
        s = parse_dsn("kvstore+cluster://h1:7000,h2:7001/?route_randomly=true")
        self.assertEqual((s.mode, s.db, s.params["route_randomly"]), ("cluster", 0, "true"))
        self.assertEqual(parse_dsn("kvstore://[::1]:6379/").addresses, (("::1", 6379),))

    def test_errors(self) -> None:
        """Bad forms are refused with a reason that never echoes the password."""
        for dsn, words in (("redis://h:1", "unsupported scheme"),
                           ("kvstore://:secretpw@h/0", "host:port"),
                           ("kvstore+sentinel://h:1/", "master name"),
                           ("kvstore+cluster://h:1/3", "no database"),
                           ("kvstore://h:1/x", "must be a number")):
            with self.assertRaises(BadConnectionString) as caught:
                parse_dsn(dsn)
            self.assertIn(words, str(caught.exception))
            self.assertNotIn("secretpw", str(caught.exception))


class CipherTests(SynchronousTestCase):
    def test_round_trip_and_wrong_secret(self) -> None:
        """A record opens with the same secret and id; another secret gets a clear error."""
        cipher = RecordCipher(b"a" * 32)
        blob = cipher.seal("session", "id1", b"alice@example.com")
        self.assertNotIn(b"alice", blob)
        self.assertEqual(cipher.open("session", "id1", blob), b"alice@example.com")
        with self.assertRaises(RecordKeyError) as caught:
            RecordCipher(b"b" * 32).open("session", "id1", blob)
        self.assertIn("different shared_secret", str(caught.exception))
        self.assertRaises(RecordKeyError, cipher.open, "session", "id2", blob)

    def test_session_json(self) -> None:
        """Sessions survive the trip through JSON, claims and groups included."""
        session = Session(id="s", user_id="u", email="e@x", issued_at=1.0, expires_at=2.0,
                          groups=("a", "b"), refresh_token="r")
        self.assertEqual(from_json(to_json(session)), session)
        # a field written by another version (here: one an earlier version had) is ignored
        written = json.loads(to_json(session)) | {"programmatic": False}
        self.assertEqual(from_json(json.dumps(written).encode()), session)

    def test_a_session_names_its_provider(self) -> None:
        """The provider that signed a session in is stored with it; one stored before
        sessions named theirs is the idp_* settings' implicit provider's."""
        partners = Session(id="s", user_id="u", email="e@x", issued_at=1.0, expires_at=2.0,
                           provider="partners")
        self.assertEqual(from_json(to_json(partners)).provider, "partners")
        older = json.loads(to_json(partners))
        del older["provider"]
        self.assertEqual(from_json(json.dumps(older).encode()).provider, "default")
