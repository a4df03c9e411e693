"""Upstreams: hosts and their live state, load balancers, the HTTP/1.1 client
connection (``http1_client``) and the pool that keeps it between requests.
"""
