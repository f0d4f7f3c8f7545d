"""The module `relay worker` hands to Dramatiq: builds the broker, adds the boot middleware, imports every actor."""

from __future__ import annotations

from actors.boot import BatchWorkerBoot
from actors.broker import build_broker
from app.settings import Settings

broker = build_broker(Settings.from_env())
broker.add_middleware(BatchWorkerBoot())

from actors import batch_items  # noqa: E402,F401  (actors bind to the broker built above)
