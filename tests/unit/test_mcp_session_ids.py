"""``Mcp-Session-Id`` bound to the person (``gateway/mcp/session_ids.py``): what the
client gets holds the server's id and a MAC over who got it, on which route, under a
key from ``shared_secret``; it gives the server's id back only for them."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.mcp.session_ids import SessionIds

SECRET = b"s" * 32
ROUTE = "https://mcp.test\n/mcp\n\n"


class SessionIdTests(SynchronousTestCase):
    def test_given_back_only_to_whom_it_was_given(self) -> None:
        ids = SessionIds(SECRET, ROUTE)
        bound = ids.bind(b"a.b-1", "default", "alice")
        self.assertTrue(bound.startswith(b"a.b-1."))
        self.assertTrue(all(0x21 <= c <= 0x7E for c in bound))  # the transport's rule
        self.assertEqual(ids.unbind(bound, "default", "alice"), b"a.b-1")
        # any other worker or process of the same configuration agrees: no state
        self.assertEqual(SessionIds(SECRET, ROUTE).unbind(bound, "default", "alice"),
                         b"a.b-1")
        for other in (ids.unbind(bound, "default", "bob"),
                      ids.unbind(bound, "other-idp", "alice"),
                      SessionIds(SECRET, ROUTE + "x").unbind(bound, "default", "alice"),
                      SessionIds(b"t" * 32, ROUTE).unbind(bound, "default", "alice"),
                      ids.unbind(b"a.b-1", "default", "alice"),
                      ids.unbind(b"a.b-2" + bound[5:], "default", "alice"),
                      ids.unbind(bound[:-1], "default", "alice"),
                      ids.unbind(b"", "default", "alice")):
            self.assertIsNone(other)

    def test_fields_cannot_slide_into_each_other(self) -> None:
        """Each field is length-prefixed: provider ``ab`` and user ``c`` is not
        provider ``a`` and user ``bc``."""
        ids = SessionIds(SECRET, ROUTE)
        self.assertIsNone(ids.unbind(ids.bind(b"x", "ab", "c"), "a", "bc"))
