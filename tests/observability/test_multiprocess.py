"""Multiprocess metrics: prepare_metrics_dir() before forking, and a real `relay api` with two gunicorn workers."""

from __future__ import annotations

import os
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


def test_a_killed_processs_metrics_directory_is_removed_by_the_next_process_and_a_live_ones_is_kept(
        tmp_path: Path) -> None:
    from app.observability.metrics import TEMP_PREFIX, remove_orphaned_dirs

    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    killed.wait()
    orphan = tmp_path / f"{TEMP_PREFIX}{killed.pid}-abc"
    live = tmp_path / f"{TEMP_PREFIX}{os.getpid()}-def"
    unrelated = tmp_path / f"{TEMP_PREFIX}12345678"  # the older names: a random suffix, no pid
    for directory in (orphan, live, unrelated):
        directory.mkdir()
        (directory / "counter_1.db").write_bytes(b"x")
    assert remove_orphaned_dirs(str(tmp_path)) == 1
    assert not orphan.exists() and live.exists() and unrelated.exists()
