"""Files of the OpenAI-compatible Files API: uploads on disk under RELAY_BATCH_PAYLOAD_DIR/files, metadata in
Postgres, and the virtual output and error files of batches."""
