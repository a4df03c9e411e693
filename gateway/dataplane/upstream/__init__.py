"""Upstreams: hosts and their live state, load balancers, the pool of persistent HTTP/1.1
connections.
"""
