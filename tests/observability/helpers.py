"""Reading Prometheus text: samples by name and labels, so tests can compare before and after."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample in TEXT keyed by (sample name, labels)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample NAME with exactly LABELS, 0 when absent."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(client: Any) -> Samples:
    """The API's metrics, read with the admin token (which may always read them)."""
    token = client.application.extensions["relay"].settings.admin_token
    res = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert res.status_code == 200, res.get_data(as_text=True)
    assert res.mimetype == "text/plain"
    return parse(res.get_data(as_text=True))
