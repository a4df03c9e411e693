"""Fuzz target: the request-target normaliser (``gateway.wire.normalize``).

Input: a request target (raw bytes), also tried behind a matched ``/public/`` prefix.

Contract, for every target the normaliser accepts:

- the path is canonical: starts with ``/``, no ``//``, no ``.``/``..`` segment, no
  control, space, backslash or non-ASCII byte, no encoded slash or backslash, escapes
  upper-case and well-formed;
- the path (what routes and policy see) has no ``;`` parameters (``;`` or ``%3B``); the
  last segment's parameters come apart, with no ``/`` in them;
- idempotent: what is forwarded, ``path + parameters + query``, normalises to
  ``(path, parameters, query)``;
- the query is passed on exactly as sent;
- the one-regex fast path decides as the general algorithm does;
- a parameter-dropping server (Tomcat, Jetty, Spring: ``;params`` and ``%3B...`` removed
  per segment, ``%2e`` decoded, dots resolved) reads the forwarded path as exactly the
  path the gateway routed (issue 39); so a path accepted under ``/public/`` is served
  under ``/public/`` by it and by an RFC 3986 server;
- ``reject_parameters`` accepts a target only if it leaves it as it is without, and only
  if no segment but the last had parameters.

Anything else must be ``BadTarget`` (never another exception).
"""

from __future__ import annotations

import re

from tests.fuzz.harness import fuzz, instrumented

with instrumented("gateway"):
    from gateway.wire.normalize import (
        BadTarget,
        _normalise_path,
        connect_authority,
        normalise_target,
        remove_dot_segments,
        split_absolute,
        split_target,
    )

_ESCAPE = re.compile(rb"%(..)")
_PARAMETERS = re.compile(rb";|%3[bB]")


def general(target: bytes) -> tuple[bytes, bytes, bytes]:
    """The general algorithm, without the fast path."""
    if not target.startswith(b"/"):
        raise BadTarget("not origin form")
    path, query = split_target(target)
    if any(byte < 0x21 or byte == 0x7F for byte in query):
        raise BadTarget("control characters in the query string")
    normalised, parameters = _normalise_path(path)
    return normalised, parameters, query


def parameter_dropping_server(path: bytes) -> bytes:
    """Tomcat's reading of a path: per segment ``;params`` dropped, ``%2e`` decoded;
    then dot segments resolved."""
    segments = []
    for segment in path.split(b"/"):
        base = _PARAMETERS.split(segment, maxsplit=1)[0]
        segments.append(base.replace(b"%2e", b".").replace(b"%2E", b"."))
    return remove_dot_segments(b"/".join(segments))


def outcome(function: object, target: bytes) -> object:
    try:
        return function(target)  # type: ignore[operator]
    except BadTarget:
        return BadTarget


def check_canonical(path: bytes) -> None:
    assert path.startswith(b"/"), path
    assert b"//" not in path, path
    for segment in path.split(b"/")[1:]:
        assert segment not in (b".", b".."), path
    for byte in path:
        assert 0x21 <= byte < 0x7F and byte != 0x5C, path
    for escape in _ESCAPE.findall(path):
        assert escape == escape.upper() and int(escape, 16) not in (0x2F, 0x5C), path
    assert path.count(b"%") == len(_ESCAPE.findall(path)), path


def check(target: bytes) -> tuple[bytes, bytes, bytes] | None:
    result = outcome(normalise_target, target)
    assert result == outcome(general, target), target
    rejecting = outcome(lambda t: normalise_target(t, reject_parameters=True), target)
    if result is BadTarget:
        assert rejecting is BadTarget, target
        return None
    assert isinstance(result, tuple)
    path, parameters, query = result
    check_canonical(path)
    assert _PARAMETERS.search(path) is None, target
    assert b"/" not in parameters, target
    assert parameters == b"" or _PARAMETERS.match(parameters), target
    assert query == split_target(target)[1], target
    assert normalise_target(path + parameters + query) == (path, parameters, query), target
    assert remove_dot_segments(path) == path, target
    assert parameter_dropping_server(path + parameters) == path, target
    if rejecting is not BadTarget:
        assert rejecting == result, target
    inner = split_target(target)[0].split(b"/")[:-1]
    if not any(_PARAMETERS.search(segment) for segment in inner):
        assert rejecting == result, target
    return path, parameters, query


def TestOneInput(data: bytes) -> None:
    check(data)
    result = check(b"/public/" + data)
    if result is not None and result[0].startswith(b"/public/"):
        served = parameter_dropping_server(result[0] + result[1])
        assert served.startswith(b"/public/") or served == b"/public", (data, served)
    # The other two target forms: only BadTarget may come out of them.
    try:
        absolute = split_absolute(data)
    except BadTarget:
        absolute = None
    if absolute is not None:
        assert absolute[0] and b"@" not in absolute[0], data
        assert absolute[1].startswith(b"/"), data
    try:
        authority = connect_authority(data)
    except BadTarget:
        return
    host, _, port = authority.rpartition(":")
    assert host and 0 < int(port) < 65536, data


if __name__ == "__main__":
    fuzz(TestOneInput)
