"""Request-target normalisation: what the router and the upstream see of a target."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from gateway.wire.normalize import (
    _FAST_PATH,
    BadTarget,
    _normalise_path,
    normalise_target,
    remove_dot_segments,
    split_absolute,
    split_target,
)

_PCHAR = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@"
_PROPERTY = settings(max_examples=300, derandomize=True, database=None, deadline=None)


def slow_path(target: bytes) -> tuple[bytes, bytes, bytes]:
    """The general algorithm ``normalise_target`` falls back to, applied unconditionally."""
    if not target.startswith(b"/"):
        raise BadTarget("not origin form")
    path, query = split_target(target)
    if any(byte < 0x21 or byte == 0x7F for byte in query):
        raise BadTarget("control characters in the query string")
    normalised, parameters = _normalise_path(path)
    return normalised, parameters, query


def outcome(function: object, target: bytes) -> object:
    """The result of ``function(target)``, or the type of the error it raised."""
    try:
        return function(target)  # type: ignore[operator]
    except BadTarget:
        return BadTarget


class SplitTargetTests(SynchronousTestCase):
    def test_split(self) -> None:
        """The query keeps its ``?`` and any further ``?``; a fragment is dropped."""
        cases = {
            b"/p?q": (b"/p", b"?q"),
            b"/p": (b"/p", b""),
            b"/p?": (b"/p", b"?"),
            b"/p?a?b=/c": (b"/p", b"?a?b=/c"),
            b"/p#frag": (b"/p", b""),
            b"/p?q#frag?x": (b"/p", b"?q"),
            b"/#?q": (b"/", b""),
        }
        for target, expected in cases.items():
            self.assertEqual(split_target(target), expected, target)


class RemoveDotSegmentsTests(SynchronousTestCase):
    def test_table(self) -> None:
        """RFC 3986 5.2.4 with merged slashes; a trailing slash survives; never above /."""
        cases = {
            b"/": b"/",
            b"/a/./b/../c": b"/a/c",
            b"/a/b/..": b"/a/",
            b"/a/b/.": b"/a/b/",
            b"/a/./": b"/a/",
            b"/..": b"/",
            b"/../..": b"/",
            b"/a/../../b": b"/b",
            b"/a/b/../../../c": b"/c",
            b"/./": b"/",
            b"//": b"/",
            b"/a//b///c": b"/a/b/c",
            b"/a/b/": b"/a/b/",
            b"/a/.../b": b"/a/.../b",
            b"/a/.b/..c": b"/a/.b/..c",
        }
        for path, expected in cases.items():
            self.assertEqual(remove_dot_segments(path), expected, path)


class NormaliseTargetTests(SynchronousTestCase):
    def test_normalised(self) -> None:
        """Dots removed, slashes merged, unreserved escapes decoded, others upper-cased."""
        cases = {
            b"/a/./b/../c": (b"/a/c", b"", b""),
            b"/public/../admin": (b"/admin", b"", b""),
            b"/public/%2e%2e/admin": (b"/admin", b"", b""),
            b"/public/%2E%2E/admin": (b"/admin", b"", b""),
            b"/public/.%2e/admin": (b"/admin", b"", b""),
            b"/a/b/..": (b"/a/", b"", b""),
            b"/../../etc": (b"/etc", b"", b""),
            b"//admin": (b"/admin", b"", b""),
            b"/a//b": (b"/a/b", b"", b""),
            b"/%41%42%7e%7E%2d%5f%30": (b"/AB~~-_0", b"", b""),
            b"/a%20b": (b"/a%20b", b"", b""),
            b"/a%3fb": (b"/a%3Fb", b"", b""),
            b"/a%23b": (b"/a%23b", b"", b""),
            b"/a%25%2a": (b"/a%25%2A", b"", b""),
            b"/a%c3%a9": (b"/a%C3%A9", b"", b""),
            b"/caf\xc3\xa9": (b"/caf%C3%A9", b"", b""),
            b"/a\"b<c>": (b"/a%22b%3Cc%3E", b"", b""),
            b"/": (b"/", b"", b""),
            b"/a/b/": (b"/a/b/", b"", b""),
        }
        for target, expected in cases.items():
            self.assertEqual(normalise_target(target), expected, target)

    def test_query_untouched(self) -> None:
        """The query is passed on byte for byte: no decoding, no dot removal, no case change."""
        cases = {
            b"/a?x=/../y&z=%2f%5c%2e": (b"/a", b"", b"?x=/../y&z=%2f%5c%2e"),
            b"/a/../b?q=%zz%": (b"/b", b"", b"?q=%zz%"),
            b"/a?\xc3\xa9": (b"/a", b"", b"?\xc3\xa9"),
            b"/a?": (b"/a", b"", b"?"),
        }
        for target, expected in cases.items():
            self.assertEqual(normalise_target(target), expected, target)

    def test_fragment_dropped(self) -> None:
        """A fragment a client sent is not routed on and not forwarded."""
        self.assertEqual(normalise_target(b"/a#frag"), (b"/a", b"", b""))
        self.assertEqual(normalise_target(b"/a?q=1#frag"), (b"/a", b"", b"?q=1"))
        self.assertEqual(normalise_target(b"/a/../b#/../c"), (b"/b", b"", b""))

    def test_refused(self) -> None:
        """Encoded slashes, backslashes, control characters and bad escapes are refused."""
        refused = [
            b"/a%2fb", b"/a%2Fb", b"/a%5cb", b"/a%5Cb", b"/a\\b",
            b"/a%00", b"/a%0a", b"/a%0D", b"/a%1f", b"/a%7f",
            b"/a b", b"/a\tb", b"/a\x00b", b"/a\x01", b"/a\x7fb",
            b"/a%", b"/a%2", b"/a%2?x=1", b"/a%zz", b"/a%g1", b"/a%1g", b"/%%41",
            b"/a?q= x", b"/a?q=\x01", b"/a?q=\x7f", b"/a?q\t",
        ]
        for target in refused:
            with self.assertRaises(BadTarget, msg=repr(target)):
                normalise_target(target)

    def test_not_origin_form(self) -> None:
        """Only origin-form targets are accepted (absolute form is split off before)."""
        for target in (b"", b"*", b"a/b", b"example.com:443", b"http://example.com/p",
                       b"?q", b"%2f"):
            with self.assertRaises(BadTarget, msg=repr(target)):
                normalise_target(target)

    def test_refusal_messages(self) -> None:
        """The reason shown to the client names the problem."""
        cases = {
            b"/a%2f": "encoded slash or backslash in the path",
            b"/a\\": "backslash in the path",
            b"/a%01": "encoded control character in the path",
            b"/a b": "control character or space in the path",
            b"/a%zz": "malformed percent-encoding in the path",
            b"/a? ": "control characters in the query string",
            b"a": "the request target must be a path starting with '/'",
        }
        for target, message in cases.items():
            with self.assertRaises(BadTarget) as caught:
                normalise_target(target)
            self.assertEqual(str(caught.exception), message)

    @_PROPERTY
    @given(
        segments=st.lists(st.text(alphabet=_PCHAR.replace(".", ""), min_size=1, max_size=8)
                          .map(lambda s: s.encode()), max_size=6),
        trailing=st.booleans(),
        query=st.none() | st.binary(max_size=12).map(
            lambda b: bytes(c for c in b if c > 0x20 and c not in (0x7F, 0x23, 0x0A))),
    )
    def test_fast_path_matches_slow_path(self, segments: list[bytes], trailing: bool,
                                         query: bytes | None) -> None:
        """Targets taking the one-regex fast path normalise exactly as the general path."""
        target = b"/" + b"/".join(segments) + (b"/" if trailing and segments else b"")
        if query is not None:
            target += b"?" + query
        self.assertTrue(_FAST_PATH.match(target), target)
        self.assertEqual(normalise_target(target), slow_path(target), target)

    @_PROPERTY
    @given(st.lists(st.sampled_from([
        b"/", b"//", b".", b"..", b"a", b"Z9", b"%2e", b"%2E", b"%41", b"%7e", b"%20", b"%2f",
        b"%5c", b"%", b"%2", b"%zz", b"\\", b" ", b"\t", b"\x7f", b"\xc3\xa9", b"?", b"#",
        b"~", b"@:", b"!$&'()*+,;=", b"\"", b"%00",
    ]), max_size=12).map(b"".join))
    def test_any_target_matches_slow_path(self, body: bytes) -> None:
        """Whatever path the fast path decides on, the general algorithm decides the same.

        (A line feed is left out here: see ``test_trailing_line_feed_refused``.)
        """
        target = b"/" + body
        self.assertEqual(outcome(normalise_target, target), outcome(slow_path, target), target)

    @_PROPERTY
    @given(st.lists(st.sampled_from([b"a", b".", b"..", b"/", b"//", b"%2e", b"b/"]),
                    max_size=10).map(b"".join))
    def test_idempotent(self, body: bytes) -> None:
        """A normalised path normalises to itself (what the router saw is what is sent)."""
        path, _, _ = normalise_target(b"/" + body)
        self.assertEqual(normalise_target(path), (path, b"", b""))

    def test_long_segment_then_other_byte(self) -> None:
        """Found by fuzzing: the fast-path regex backtracked exponentially when a long
        segment was followed by a byte outside its class (``%``, ``"``, a control), so one
        such request stopped the reactor. It now takes one linear match."""
        for tail, expected in ((b"%41", b"A"), (b"%22", b"%22"), (b'"', b"%22")):
            path, _, _ = normalise_target(b"/" + b"a" * 4000 + tail)
            self.assertEqual(path, b"/" + b"a" * 4000 + expected)
        with self.assertRaises(BadTarget):
            normalise_target(b"/public/" + b"x" * 4000 + b"\x00")

    def test_trailing_line_feed_refused(self) -> None:
        """A line feed at the very end of a path or query is a control character: refused."""
        for target in (b"/a\n", b"/\n", b"/a?q\n"):
            with self.assertRaises(BadTarget, msg=repr(target)):
                normalise_target(target)


def parameter_dropping_server(path: bytes) -> bytes:
    """How Tomcat, Jetty and Spring read a path: ``;params`` (``;`` or ``%3B``, either
    case) dropped from every segment, ``%2e`` decoded, slashes merged, dot segments
    resolved."""
    segments = []
    for segment in path.split(b"/"):
        base = re.split(rb";|%3[bB]", segment, maxsplit=1)[0]
        segments.append(base.replace(b"%2e", b".").replace(b"%2E", b"."))
    return remove_dot_segments(b"/".join(segments))


class PathParameterTests(SynchronousTestCase):
    """Issue 12: ``/public/..;/admin`` passed a ``/public/`` prefix check and reached
    ``/admin`` on upstreams that drop path parameters."""

    def test_findings_refused(self) -> None:
        """The reported targets, and their encoded and single-dot variants, are refused."""
        refused = [
            b"/public/..;/admin", b"/public/..%3b/admin", b"/public/..%3B/admin",
            b"/public/..;jsessionid=1/admin", b"/public/%2e%2e;x/admin",
            b"/public/%2E%2E%3bx/admin", b"/public/.%2e;/admin", b"/public/.;x/admin",
            b"/public/..;", b"/public/a/..;/..;/admin", b"/..;/admin",
        ]
        for target in refused:
            with self.assertRaises(BadTarget, msg=repr(target)) as caught:
                normalise_target(target)
            self.assertIn("';' parameters", str(caught.exception))

    @_PROPERTY
    @given(st.lists(st.sampled_from([
        b"/", b"//", b".", b"..", b"a", b";", b";x=1", b"%3b", b"%3B", b"%2e", b"%2E",
        b"public", b"admin", b"=",
    ]), max_size=12).map(b"".join))
    def test_never_leaves_the_matched_prefix(self, body: bytes) -> None:
        """Whatever the policy matched under ``/public/``, a parameter-dropping upstream
        serves under ``/public/`` too; and a normalised path normalises to itself."""
        try:
            path, parameters, _ = normalise_target(b"/public/" + body)
        except BadTarget:
            return
        self.assertEqual(normalise_target(path + parameters), (path, parameters, b""), path)
        if path.startswith(b"/public/"):
            served = parameter_dropping_server(path + parameters)
            self.assertTrue(served.startswith(b"/public/") or served == b"/public", (path, served))


class ParametersOnSegmentsTests(SynchronousTestCase):
    """Issue 39: ``/private;x/admin/x`` passed ``deny: http_path starts_with
    /private/admin`` and ``/secure;jsessionid=1/doc`` missed the ``/secure/`` route, while
    Tomcat, Jetty and Spring served ``/private/admin/x`` and ``/secure/doc``. The path
    routed and authorized is now the path without parameters."""

    def test_table(self) -> None:
        """(path routed and authorized, last segment's parameters) for each trick."""
        cases = {
            b"/private;x/admin/x": (b"/private/admin/x", b""),
            b"/private;/admin/x": (b"/private/admin/x", b""),
            b"/private%3bx/admin/x": (b"/private/admin/x", b""),
            b"/private%3Bx/admin/x": (b"/private/admin/x", b""),
            b"/private/admin;x/x": (b"/private/admin/x", b""),
            b"/secure;jsessionid=1/doc": (b"/secure/doc", b""),
            b"/;x/private/admin/x": (b"/private/admin/x", b""),
            b"/private/;x/admin/x": (b"/private/admin/x", b""),
            b"/a;x;y=1/b": (b"/a/b", b""),
            b"/a;x/b;y/c;z": (b"/a/b/c", b";z"),
            b"/app;jsessionid=1": (b"/app", b";jsessionid=1"),
            b"/app/page;jsessionid=1": (b"/app/page", b";jsessionid=1"),
            b"/app/;jsessionid=1": (b"/app/", b";jsessionid=1"),
            b"/app%3Bjsessionid=1": (b"/app", b"%3Bjsessionid=1"),
            b"/login;": (b"/login", b";"),
            b"/admin;": (b"/admin", b";"),
            b"/;x": (b"/", b";x"),
            b"/a/...;x/b": (b"/a/.../b", b""),
            b"/a/.x;y/b": (b"/a/.x/b", b""),
            b"/public/;x/../admin": (b"/public/admin", b""),
            b"/a%253bx/b": (b"/a%253bx/b", b""),  # one decoding: a literal "%3b", no ";"
            b"/private/admin./x": (b"/private/admin./x", b""),  # no trailing-dot folding
            b"/a;x/b?q=;y": (b"/a/b", b""),
        }
        for target, (path, parameters) in cases.items():
            query = split_target(target)[1]
            self.assertEqual(normalise_target(target), (path, parameters, query), target)

    def test_same_as_parameter_dropping_server(self) -> None:
        """What the gateway routes is what Tomcat reads of what the gateway forwards."""
        for target in (b"/private;x/admin/x", b"/a%3bx/b;c", b"/;x//y;z/", b"/a/;x"):
            path, parameters, _ = normalise_target(target)
            self.assertEqual(parameter_dropping_server(path + parameters), path, target)

    def test_reject(self) -> None:
        """``path_with_parameters_action: reject``: 400 for parameters on any segment but
        the last; the last segment's still pass."""
        for target in (b"/private;x/admin/x", b"/private%3Bx/admin", b"/;x/a", b"/a/;/b"):
            with self.assertRaises(BadTarget, msg=repr(target)) as caught:
                normalise_target(target, reject_parameters=True)
            self.assertIn("path_with_parameters_action", str(caught.exception))
        self.assertEqual(normalise_target(b"/app;jsessionid=1", reject_parameters=True),
                         (b"/app", b";jsessionid=1", b""))
        self.assertEqual(normalise_target(b"/a/b?x=;y", reject_parameters=True),
                         (b"/a/b", b"", b"?x=;y"))

    def test_fast_path_excludes_parameters(self) -> None:
        """A ``;`` in the path never takes the one-regex fast path (which would keep it);
        in the query it may."""
        self.assertIsNone(_FAST_PATH.fullmatch(b"/a;x/b"))
        self.assertIsNotNone(_FAST_PATH.fullmatch(b"/a/b?x=;y"))

    @_PROPERTY
    @given(st.lists(st.sampled_from([
        b"/", b"//", b"a", b"b", b";", b";x=1", b"%3b", b"%3B", b"%253b", b".x", b"...",
        b"=", b"%41", b"%2e",
    ]), max_size=12).map(b"".join))
    def test_routed_path_is_served_path(self, body: bytes) -> None:
        """For any accepted target: the routed path has no parameters, a
        parameter-dropping server reads the forwarded path as the routed one, and a plain
        RFC 3986 server reads it as the routed path plus the last segment's parameters."""
        try:
            path, parameters, _ = normalise_target(b"/" + body)
        except BadTarget:
            return
        self.assertNotIn(b";", path)
        self.assertNotIn(b"%3B", path)
        self.assertEqual(parameter_dropping_server(path + parameters), path, body)
        self.assertNotIn(b"/", parameters)
        self.assertEqual(normalise_target(path + parameters), (path, parameters, b""), body)


class SplitAbsoluteTests(SynchronousTestCase):
    def test_split(self) -> None:
        """An absolute-form target becomes (authority, origin-form target)."""
        cases = {
            b"http://example.com/p?q": (b"example.com", b"/p?q"),
            b"HTTPS://Example.com:8443/p": (b"Example.com:8443", b"/p"),
            b"http://example.com": (b"example.com", b"/"),
            b"http://example.com?q=1": (b"example.com", b"/?q=1"),
            b"https://[::1]:8443/a/../b": (b"[::1]:8443", b"/a/../b"),
        }
        for target, expected in cases.items():
            self.assertEqual(split_absolute(target), expected, target)

    def test_not_absolute(self) -> None:
        """Origin form, authority form and other schemes are not absolute-form http targets."""
        for target in (b"/p", b"*", b"example.com:443", b"ftp://example.com/p", b"http:/x"):
            self.assertIsNone(split_absolute(target), target)

    def test_refused(self) -> None:
        """No authority, or userinfo in it, is refused."""
        for target in (b"http:///p", b"https://", b"http://?q", b"http://user@host/p",
                       b"http://user:pw@host"):
            with self.assertRaises(BadTarget, msg=repr(target)):
                split_absolute(target)
