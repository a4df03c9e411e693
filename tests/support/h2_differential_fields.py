"""The differential's rules for header fields (see ``h2_differential_rules`` for what a
rule is): ``h2``'s own validator judges each request head and trailer block, and these
rules turn its verdict into the engine's, each with the RFC sentence that allows the
difference. A rule that forgives one problem asks ``h2`` again without it (``h2`` stops
at the first problem it finds)."""

from __future__ import annotations

import h2.exceptions
from h2.utilities import HeaderValidationFlags, validate_headers

from tests.support.h2_differential_rules import Header, State, Stream

REQUEST_FLAGS = HeaderValidationFlags(is_client=False, is_trailer=False,
                                      is_response_header=False, is_push_promise=False)
TRAILER_FLAGS = REQUEST_FLAGS._replace(is_trailer=True)


def h2_verdict(headers: list[Header], flags: HeaderValidationFlags = REQUEST_FLAGS
               ) -> str | None:
    """``h2``'s own validation of a header block: why it is malformed, or None. (It
    stops at the first problem, so a rule that forgives one asks again without it.)"""
    try:
        list(validate_headers(headers, flags))
    except h2.exceptions.ProtocolError as exc:
        return str(exc)
    return None


def request_verdict(headers: list[Header], ended: bool, state: State,
                    stream_id: int) -> str | None:
    """Why the engine must refuse the request head ``headers`` (None: hand it up)."""
    if stream_id in state.refuse:
        state.refuse.discard(stream_id)
        return "depends on itself"  # see _headers
    why = _request_fields(headers, state)
    values = {name: value for name, value in reversed(headers)}  # the first of each
    length = values.get(b"content-length", b"")
    # RFC 9113 8.1.1 (as in after_error): END_STREAM on the HEADERS means a body of 0
    # bytes, so a non-zero content-length is malformed; h2 does not check it there.
    if why is None and ended and length.isdigit() and int(length):
        return "a content-length with no body"
    return why


def _request_fields(headers: list[Header], state: State) -> str | None:
    # RFC 8441 3: "If a client were to use the provisions of the extended CONNECT method
    # defined in this document without first receiving a SETTINGS_ENABLE_CONNECT_PROTOCOL
    # parameter, a non-supporting peer would detect a malformed request and generate a
    # stream error". The engine does not advertise it; h2 accepts :protocol on CONNECT.
    if any(name == b":protocol" for name, _ in headers):
        return "the :protocol pseudo-header (RFC 8441 3)"
    # RFC 9113 8.2.2: the TE header field "MAY be present in an HTTP/2 request; when it
    # is, it MUST NOT contain any value other than 'trailers'." The engine reads that
    # literally; h2 compares it lower-cased.
    if any(name == b"te" and value != b"trailers" for name, value in headers):
        return "te other than 'trailers'"
    h2_why = h2_verdict(headers)
    if h2_why is None:
        return None
    # RFC 9113 8.3.1: ":authority ... Clients that generate HTTP/2 requests directly MUST
    # use the ':authority' pseudo-header field to convey authority information, unless
    # there is no authority information to convey". So a request with neither it nor
    # Host is not malformed; the engine hands it up (the codec answers 400). (h2 checks
    # this last: nothing else is wrong.)
    if "does not have an :authority or Host header" in h2_why:
        return None
    # RFC 9113 8.3.1 has one Host rule: "A server SHOULD treat a request as malformed if
    # it contains a Host header field that identifies an entity that differs from the
    # entity in the ':authority' pseudo-header field." Host repeated is not malformed
    # HTTP/2 (the codec routes by :authority, else the last Host, and replaces Host
    # upstream); h2 refuses it. The engine compares every Host with :authority.
    if "has multiple Host headers" in h2_why:
        authority = next((value for name, value in headers if name == b":authority"), None)
        hosts = [value for name, value in headers if name == b"host"]
        if authority is not None and any(host != authority for host in hosts):
            return "host and :authority differ"
        # asked again with the other Host fields renamed (not removed: what follows
        # them keeps its place, and h2 checks the order of pseudo-header fields)
        last = len(headers) - 1 - [name for name, _ in headers][::-1].index(b"host")
        return _request_fields([(b"x-host", value) if name == b"host" and index != last
                                else (name, value)
                                for index, (name, value) in enumerate(headers)], state)
    return h2_why


def trailers_verdict(headers: list[Header], stream: Stream, state: State,
                     stream_id: int) -> str | None:
    """Why the engine must reset a stream on its trailers (None: they end it)."""
    h2_why = h2_verdict(headers, TRAILER_FLAGS)
    if stream_id in state.refuse:
        state.refuse.discard(stream_id)
        return "trailers without END_STREAM, or depending on their own stream"
    length = {name: value for name, value in reversed(stream.headers)}.get(
        b"content-length")
    # RFC 9113 8.1.1 (content-length, as above): h2 forgets the content-length when
    # trailers come; the engine checks the body against it.
    if length is not None and length.isdigit() and int(length) != stream.body:
        return "a body that does not match its content-length"
    return h2_why
