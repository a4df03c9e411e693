"""Where the gateway goes past the public API of a library other than Twisted.

``gateway/twisted_ext`` does it for Twisted (Conch included) and the pyOpenSSL under
Twisted's TLS; this package for the rest, one module per library. Each module binds or
wraps the private names it needs under names of ours, and declares them
(``RELIES_ON``: looked up on the object; ``RELIES_ON_INSTANCE``: attributes the library
sets on its instances, looked for in the class's source). ``tests/unit/test_private_names.py``
holds the rule that no other module uses a library's private name and that each
adapter declares every one it uses; ``tests/unit/test_twisted_canary.py`` checks the
declared names against the installed versions.

- ``hpack_tables``: hpack's static table and Huffman decoder, for our HPACK decoder;
- ``redis``: txredisapi's connection handler's factory, and Sentinel over TLS;
- ``otel_logs``: OpenTelemetry's logs API and SDK (experimental, so underscore-named);
- ``zipkin``: the Zipkin v2 JSON encoder without a null span kind;
- ``prometheus``: prometheus-client's spelling of a bucket bound.
"""
