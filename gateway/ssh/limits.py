"""The bounds on what an SSH client may make the gateway hold (SECURITY.md)."""

from __future__ import annotations

LOGIN_GRACE = 60.0  # seconds from connect to authenticated, unless a sign-in is pending
SIGN_IN_WAIT = 300.0  # seconds a connection waits for its person to sign in
UNAUTHENTICATED_PER_ADDRESS = 10  # connections not yet authenticated, per client address
UNAUTHENTICATED_TOTAL = 500
PREAUTH_BUFFER = 64 * 1024  # bytes buffered before authentication
AUTH_ATTEMPTS = 10  # failed authentication requests per connection
CHANNELS_PER_CONNECTION = 10
WINDOW = 2 * 1024 * 1024  # each channel's receive window
MAX_PACKET = 32768  # each channel's largest data packet
RECHECK_SECONDS = 1.0  # continuous authorization: how often each connection is decided
