-- Usage API reads. Time-range summaries and pages already use usage_events_created / usage_events_model_time
-- (0003) and relay-key readers usage_events_credential; inference-token readers see their user's events, so
-- they need the principal's events in time order without scanning the table.
CREATE INDEX usage_events_principal ON usage_events (principal_id, created_at DESC, id DESC);
