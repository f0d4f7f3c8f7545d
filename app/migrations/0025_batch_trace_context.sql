-- The W3C traceparent of the span that submitted a batch (NULL when tracing was off): each item's run is a trace
-- of its own whose root links to it (docs/operations.md, Tracing).
ALTER TABLE batches ADD COLUMN trace_context text;
