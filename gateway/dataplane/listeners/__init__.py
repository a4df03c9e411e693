"""The listeners: the main stack (TCP, PROXY protocol, TLS, codecs) and the http->https
redirector.
"""
