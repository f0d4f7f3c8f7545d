"""Errors of the provider batch APIs (OpenAI Files + Batches, Anthropic Message Batches)."""

from __future__ import annotations

from app.errors import BadRequest, NotFound, PayloadTooLarge


class FileNotFound(NotFound):
    """No file with that id that this caller may see (also for malformed ids)."""

    code = "file_not_found"


class UnsupportedEndpoint(BadRequest):
    """An OpenAI batch endpoint Relay does not run (embeddings, completions, images, ...)."""

    code = "unsupported_endpoint"
    param = "endpoint"


class InvalidInputFile(BadRequest):
    """The input file is not an uploaded batch input file (e.g. another batch's output)."""

    code = "invalid_input_file"
    param = "input_file_id"


class UnsupportedPurpose(BadRequest):
    """Relay keeps files for batches only."""

    code = "unsupported_purpose"
    param = "purpose"


class FileTooLarge(PayloadTooLarge):
    """An upload larger than RELAY_FILES_MAX_BYTES."""

    code = "file_too_large"


class FormTooLarge(PayloadTooLarge):
    """A multipart upload with more parts, or a larger text field or part header block, than the form allows."""

    code = "form_too_large"
