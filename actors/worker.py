"""The module `relay worker` hands to Dramatiq: builds the broker, then imports every actor."""

from __future__ import annotations

from actors.broker import build_broker
from app.settings import Settings

broker = build_broker(Settings.from_env())

from actors import batch_items  # noqa: E402,F401  (actors bind to the broker built above)
