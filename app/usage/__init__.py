"""Usage events: the event and its pricing, the writer that commits them, and their queries."""
