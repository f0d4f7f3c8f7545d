"""Multiprocess metrics: prepare_metrics_dir() before forking, and a real `relay api` with two gunicorn workers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from devtools.processes import ROOT, start_api
from tests.observability.helpers import parse, value

pytestmark = pytest.mark.integration

FORKING_PARENT = textwrap.dedent("""
    import os, sys
    from app.observability.metrics import observe_item, prepare_metrics_dir, render_metrics
    import prometheus_client  # imported before the directory is set, as a library might
    prepare_metrics_dir(sys.argv[1])
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            observe_item("completed", 1.5)
            os._exit(0)
        os.waitpid(pid, 0)
    sys.stdout.write(render_metrics(None)[0].decode())
""")


def test_metrics_recorded_in_forked_children_add_up_after_a_stale_directory_is_emptied(tmp_path: Path) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    (directory / "histogram_99999.db").write_bytes(b"stale from the previous run")
    out = subprocess.run([sys.executable, "-c", FORKING_PARENT, str(directory)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    samples = parse(out)
    assert value(samples, "relay_batch_item_duration_seconds_count", state="completed") == 3
    assert value(samples, "relay_batch_item_duration_seconds_sum", state="completed") == pytest.approx(4.5)
    assert not (directory / "histogram_99999.db").exists()


def test_a_two_worker_api_reports_the_requests_of_both_workers(settings_env, tmp_path: Path) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    api = start_api({**settings_env, "PROMETHEUS_MULTIPROC_DIR": str(directory)}, tmp_path, workers=2)
    try:
        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda _: requests.get(api.url + "/healthz", timeout=10).status_code, range(40)))
        assert codes == [200] * 40
        headers = {"Authorization": f"Bearer {settings_env['RELAY_ADMIN_TOKEN']}"}
        samples = parse(requests.get(api.url + "/metrics", headers=headers, timeout=10).text)
        assert value(samples, "relay_http_requests_total", method="GET", route="/healthz", status="200") == 40
        assert ("relay_batch_items", frozenset({("state", "queued")})) in samples  # present, whatever its value
        assert ("relay_metrics_database_up", frozenset()) in samples
    finally:
        api.stop()
