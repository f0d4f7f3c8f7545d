"""Idempotency keys: a create retried with the same `Idempotency-Key` answers its first answer (24 h, per caller)."""
