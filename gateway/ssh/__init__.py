"""Native SSH: the gateway as an SSH server (``ssh LOGIN@ROUTE@gateway``) that signs
people in with the identity provider, decides with the route's policy, and logs into the
route's server with a short-lived certificate from its own user CA, recording sessions.

Pure parts (``user_names``, ``certs``, ``host_cert``, ``asciicast``, ``algorithms``,
``limits``) are plain functions and values; the protocols (``transport``, ``auth``,
``upstream``, ``channel_relay``, ``jump``) only move bytes and act on their results;
``recorder`` writes recordings on a thread of its own; ``service`` is the Twisted
service ``gateway.tree`` adds for ``ssh_address``.
"""
