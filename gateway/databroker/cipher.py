"""Records are encrypted at rest with a key derived from ``shared_secret``: whoever can
read Redis sees no sessions, tokens or e-mail addresses."""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


class RecordKeyError(Exception):
    """A record written with another shared_secret (or damaged)."""


class RecordCipher:
    def __init__(self, shared_secret: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"gateway databroker records").derive(shared_secret)
        self._aead = ChaCha20Poly1305(key)

    def seal(self, kind: str, record_id: str, data: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data, f"{kind}/{record_id}".encode())

    def open(self, kind: str, record_id: str, blob: bytes) -> bytes:
        try:
            return self._aead.decrypt(blob[:12], blob[12:], f"{kind}/{record_id}".encode())
        except (InvalidTag, ValueError):
            raise RecordKeyError(
                f"the stored {kind} record {record_id!r} cannot be decrypted: it was written "
                "with a different shared_secret (or is damaged)") from None
