"""Keys derived from RELAY_SECRET_KEY, and host-key secrets encrypted at rest with Fernet."""

from __future__ import annotations

import base64
import hmac

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.errors import RelayError

HOST_KEY_PURPOSE = "relay host-key encryption v1"
TOKEN_PURPOSE = "relay inference-token signing v1"  # noqa: S105  (an HKDF label, not a secret)


class SecretUnreadable(RelayError):
    """A stored secret cannot be decrypted (RELAY_SECRET_KEY changed); the value is never shown."""

    status = 500
    code = "secret_unreadable"


def derive_key(secret_key: str, purpose: str) -> bytes:
    """32 bytes derived from RELAY_SECRET_KEY with HKDF-SHA256, one independent key per purpose."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose.encode())
    return hkdf.derive(secret_key.encode())


class SecretBox:
    """Encrypts and decrypts host-key secrets; the key never leaves this object."""

    def __init__(self, secret_key: str) -> None:
        self._fernet = Fernet(base64.urlsafe_b64encode(derive_key(secret_key, HOST_KEY_PURPOSE)))

    def __repr__(self) -> str:
        return "SecretBox(<hidden>)"

    def encrypt(self, value: str) -> bytes:
        """The Fernet token for VALUE (random IV: two encryptions of one value differ)."""
        return self._fernet.encrypt(value.encode())

    def decrypt(self, token: bytes) -> str:
        """The plaintext of TOKEN; SecretUnreadable (without the value) when it cannot be read."""
        try:
            return self._fernet.decrypt(bytes(token)).decode()
        except (InvalidToken, UnicodeDecodeError) as exc:
            raise SecretUnreadable(
                message="a stored host-key secret cannot be decrypted with RELAY_SECRET_KEY") from exc

    def matches(self, token: bytes | None, value: str) -> bool:
        """True when TOKEN decrypts to VALUE (an unreadable token never matches)."""
        if token is None:
            return False
        try:
            return hmac.compare_digest(self.decrypt(token).encode(), value.encode())
        except SecretUnreadable:
            return False
