"""One request/response through the proxy, shared by both codecs: state and local answers,
routing and authorization, the upstream relay, the upstream request head, header rules,
the access log.
"""
