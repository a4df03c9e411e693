"""The algorithms the gateway's SSH server and client offer: current ones only.

No CBC or 3DES ciphers, no SHA-1 or MD5 MACs, no SHA-1 key exchanges (DH group1,
group14-sha1, group-exchange-sha1), no ssh-rsa (SHA-1) or DSA signatures, no
compression (a decompression bomb before authentication is not worth the bytes)."""

from __future__ import annotations

from gateway.twisted_ext.conch_kex import supported_key_exchanges

CIPHERS = [b"aes256-ctr", b"aes192-ctr", b"aes128-ctr"]
MACS = [b"hmac-sha2-512", b"hmac-sha2-256"]
_KEX_PREFERENCE = [b"mlkem768x25519-sha256", b"curve25519-sha256",
                   b"curve25519-sha256@libssh.org", b"ecdh-sha2-nistp256",
                   b"ecdh-sha2-nistp384", b"ecdh-sha2-nistp521"]
KEY_EXCHANGES = [k for k in _KEX_PREFERENCE if k in supported_key_exchanges()]
COMPRESSIONS = [b"none"]
# signature algorithms of user keys (publickey auth) and of server host keys
SIGNATURES = [b"ssh-ed25519", b"ecdsa-sha2-nistp256", b"ecdsa-sha2-nistp384",
              b"ecdsa-sha2-nistp521", b"rsa-sha2-512", b"rsa-sha2-256"]
# a host key's type as known_hosts writes it -> the signature algorithms it makes
HOST_KEY_SIGNATURES = {
    "ssh-ed25519": [b"ssh-ed25519"],
    "ecdsa-sha2-nistp256": [b"ecdsa-sha2-nistp256"],
    "ecdsa-sha2-nistp384": [b"ecdsa-sha2-nistp384"],
    "ecdsa-sha2-nistp521": [b"ecdsa-sha2-nistp521"],
    "ssh-rsa": [b"rsa-sha2-512", b"rsa-sha2-256"],
    "rsa-sha2-256": [b"rsa-sha2-512", b"rsa-sha2-256"],
    "rsa-sha2-512": [b"rsa-sha2-512", b"rsa-sha2-256"],
}
