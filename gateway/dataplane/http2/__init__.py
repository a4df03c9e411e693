"""HTTP/2 on the client side of the gateway (RFC 9113): ``protocol`` (its numbers, once),
``hpack``, ``fields`` (which requests are well-formed), ``engine`` (frames and stream
state, no I/O, ``events`` out), ``guard`` (per-connection abuse budgets), and the codec
that ties them to exchanges: ``connection`` with one ``stream.StreamSink`` per stream.
"""
