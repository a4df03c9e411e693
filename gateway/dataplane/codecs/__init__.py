"""The downstream codecs: choosing HTTP/1.1 or HTTP/2 per connection, parsing and writing
each, the request-target normaliser.
"""
