"""Re-runs of batches created through the OpenAI or Anthropic API (app/batches/rerun.py plans them): submitted
through the same intake as that API's create, so the new batch is one of that API's too. No Flask."""

from __future__ import annotations

import json
from collections.abc import Callable
from uuid import UUID

from marshmallow import ValidationError

from app.auth_model import Caller
from app.batches.rerun import RerunPlan
from app.compat import anthropic_view, openai_files, openai_view
from app.compat.views import openai_batch_id, parse_batch_id
from app.errors import ValidationFailed
from app.payload_port import StagedFile
from app.runtime import Runtime
from schemas.compat import OpenAIBatchCreateSchema


def rerun_openai(runtime: Runtime, caller: Caller, plan: RerunPlan) -> UUID:
    """OpenAI's create of a new input file (listed in the caller's files) holding the lines to re-run."""
    source = plan.source
    try:
        create = OpenAIBatchCreateSchema().load({"input_file_id": "", "endpoint": source["endpoint"],
                                                 "completion_window": source["completion_window"],
                                                 "metadata": plan.metadata})
    except ValidationError as exc:
        raise ValidationFailed(message="invalid re-run of an OpenAI batch: metadata holds at most 16 string pairs",
                               details=exc.messages) from None
    upload = _input_file(runtime, caller, plan)
    try:
        created = openai_view.create_batch(runtime, caller, {**create, "input_file_id": upload}, plan.lineage)
    except BaseException:
        openai_files.delete(runtime, caller, upload)
        raise
    return _created_id(created["id"])


def _input_file(runtime: Runtime, caller: Caller, plan: RerunPlan) -> str:
    """A batch input file of the lines to re-run, uploaded as the caller; its OpenAI id."""
    disk = openai_view.file_disk(runtime)
    staged: StagedFile = disk.stage()
    head = {"method": "POST", "url": plan.source["endpoint"]}
    try:
        for custom_id, body in zip(plan.custom_ids, plan.bodies, strict=True):
            if b"\n" in body or b"\r" in body:  # one line per request
                body = json.dumps(json.loads(body)).encode()
            staged.handle.write(json.dumps({"custom_id": custom_id, **head})[:-1].encode() + b',"body":' + body
                                + b"}\n")
    except BaseException:
        disk.discard(staged)
        raise
    name = f"rerun-of-{openai_batch_id(plan.source['id'])}.jsonl"
    return str(openai_files.upload(runtime, caller, staged, filename=name, purpose="batch")["id"])


def rerun_anthropic(runtime: Runtime, caller: Caller, plan: RerunPlan) -> UUID:
    """Anthropic's create of the requests to re-run, with their custom_ids."""
    requests = (b'{"custom_id":%s,"params":%s}' % (json.dumps(custom_id).encode(), body)
                for custom_id, body in zip(plan.custom_ids, plan.bodies, strict=True))
    raw = b'{"requests":[' + b",".join(requests) + b"]}"
    return _created_id(anthropic_view.create_batch(runtime, caller, raw, plan.lineage)["id"])


def _created_id(text_id: str) -> UUID:
    parsed = parse_batch_id(text_id)
    assert parsed is not None
    return parsed


# The re-run of a batch of each provider API, by the batch's `api` (Relay's own: app.batches.rerun.submit_rerun).
RERUNS: dict[str, Callable[[Runtime, Caller, RerunPlan], UUID]] = {openai_view.API: rerun_openai,
                                                                    anthropic_view.API: rerun_anthropic}
