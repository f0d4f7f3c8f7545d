"""Catalog validation: every problem reported at once, each with its path in the file, never a secret."""

from __future__ import annotations

import pytest

from app.catalog.validate import InvalidCatalog, parse_document, validate_catalog
from schemas.durations import DurationError, format_duration, parse_duration
from tests.catalog.helpers import HOST_KEY_SECRETS, base_catalog


def problems_of(doc: object, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(InvalidCatalog) as caught:
        validate_catalog(doc, env or {})
    return caught.value.problems


def test_the_base_catalog_is_valid() -> None:
    doc = validate_catalog(base_catalog(), {})
    assert doc["policies"][1]["key_selection"] == "prioritized"
    assert doc["policies"][0]["rate_limits"][0]["per"] == 60


def test_an_unknown_adapter_is_reported_with_its_path() -> None:
    doc = base_catalog()
    doc["models"][1]["bindings"][0]["adapter"] = "gemini"
    assert problems_of(doc) == [
        "models[1].bindings[0].adapter: must be one of openai, anthropic, openai_responses"]


def test_every_problem_is_reported_at_once() -> None:
    doc = base_catalog()
    doc["models"][0]["bindings"][0]["adapter"] = "nope"
    doc["models"][0]["bindings"][0]["host"] = "missing-host"
    doc["policies"][0]["key_selection"] = "random"
    doc["policies"][0]["rate_limits"][0]["per"] = "soon"
    doc["policies"][1]["key_pool"] = ["t-openai-1", "no-such-key"]
    doc["users"][0]["policy"] = "ghost"
    doc["hosts"][0]["keys"][0]["colour"] = "blue"
    del doc["models"][1]["bindings"][0]["upstream_model"]
    problems = problems_of(doc)
    paths = {p.split(":")[0] for p in problems}
    assert paths == {
        "models[0].bindings[0].adapter", "models[0].bindings[0].host", "policies[0].key_selection",
        "policies[0].rate_limits[0].per", "policies[1].key_pool[1]", "users[0].policy",
        "hosts[0].keys[0].colour", "models[1].bindings[0].upstream_model"}
    assert "models[1].bindings[0].upstream_model: missing data for required field" in problems
    assert "hosts[0].keys[0].colour: unknown field" in problems


def test_duplicate_names_are_reported() -> None:
    doc = base_catalog()
    doc["models"].append(dict(doc["models"][0]))
    doc["hosts"][1]["keys"].append({"name": "t-openai-1", "value": "x"})
    problems = problems_of(doc)
    assert "models[2].name: duplicate name 'gpt-4o-mini' (also models[0])" in problems
    assert any(p.startswith("hosts[1].keys[1].name: duplicate key name") for p in problems)


def test_references_between_teams_projects_and_principals_are_checked() -> None:
    doc = base_catalog()
    doc["projects"][0]["team"] = "nobody"
    doc["service_accounts"][0]["project"] = "elsewhere"
    problems = problems_of(doc)
    assert "projects[0].team: no team named 'nobody' in this catalog" in problems
    assert "service_accounts[0].project: no project named 'elsewhere' in this catalog" in problems


def test_value_env_must_name_a_variable_set_at_apply_time() -> None:
    doc = base_catalog()
    doc["hosts"][0]["keys"][0] = {"name": "t-openai-1", "value_env": "RELAY_TEST_UNSET_KEY"}
    assert problems_of(doc) == ["hosts[0].keys[0].value_env: environment variable RELAY_TEST_UNSET_KEY is not set"
                                " (it is read when the catalog is applied)"]
    loaded = validate_catalog(doc, {"RELAY_TEST_UNSET_KEY": "sk-from-env"})
    assert loaded["hosts"][0]["keys"][0]["_secret"] == "sk-from-env"


def test_a_key_cannot_give_both_value_and_value_env() -> None:
    doc = base_catalog()
    doc["hosts"][0]["keys"][0]["value_env"] = "X"
    assert problems_of(doc, {"X": "y"}) == ["hosts[0].keys[0]: give value or value_env, not both"]


def test_base_url_expands_environment_references() -> None:
    doc = base_catalog()
    doc["hosts"][0]["base_url"] = "${RELAY_TEST_UPSTREAM:-http://127.0.0.1:9100}/"
    doc["hosts"][1]["base_url"] = "${RELAY_TEST_UPSTREAM}"
    assert problems_of(doc) == ["hosts[1].base_url: environment variable RELAY_TEST_UPSTREAM is not set"]
    loaded = validate_catalog(doc, {"RELAY_TEST_UPSTREAM": "http://10.0.0.1:8000"})
    assert [h["base_url"] for h in loaded["hosts"]] == ["http://10.0.0.1:8000", "http://10.0.0.1:8000"]
    assert validate_catalog(base_catalog() | {"hosts": [doc["hosts"][0], *base_catalog()["hosts"][1:]]},
                            {})["hosts"][0]["base_url"] == "http://127.0.0.1:9100"


def test_base_url_must_be_http() -> None:
    doc = base_catalog()
    doc["hosts"][0]["base_url"] = "ftp://example.com"
    assert problems_of(doc) == ["hosts[0].base_url: must be an http:// or https:// URL"]


def test_rate_limits_need_a_whole_window_and_something_to_limit() -> None:
    doc = base_catalog()
    doc["policies"][0]["rate_limits"] = [{"per": "60s"}, {"requests": 5, "per": "1.5s"}, {"tokens": 0, "per": "1m"}]
    assert sorted(problems_of(doc)) == [
        "policies[0].rate_limits[0]: give requests, tokens or both",
        "policies[0].rate_limits[1].per: must be a whole number of seconds, from 1s to 366d",
        "policies[0].rate_limits[2].tokens: must be greater than or equal to 1"
        " and less than or equal to 1000000000000000"]


def test_wrong_types_are_reported_not_crashed_on() -> None:
    doc = base_catalog()
    doc["hosts"] = {"openai": {}}
    doc["models"][0]["bindings"] = "openai"
    doc["models"][1]["enabled"] = "yes please"
    doc["policies"][0]["models"] = [1, None]
    doc["teams"] = [["t-team"]]
    problems = problems_of(doc)
    assert "hosts: not a valid list" in problems
    assert "models[0].bindings: not a valid list" in problems
    assert "models[1].enabled: not a valid boolean" in problems
    assert "teams[0]: invalid input type" in problems


@pytest.mark.parametrize("raw", [None, [], "hosts", 3])
def test_a_document_that_is_not_a_mapping_is_rejected(raw: object) -> None:
    assert problems_of(raw) == ["(document): must be a mapping with hosts, models, policies, ..."]


def test_yaml_syntax_errors_give_the_line_but_not_the_text() -> None:
    text = f"hosts:\n  - name: openai\n    keys: [{{name: k, value: {HOST_KEY_SECRETS[0]}}}\n  bad: : :\n"
    with pytest.raises(InvalidCatalog) as caught:
        parse_document(text, "yaml")
    (problem,) = caught.value.problems
    assert problem.startswith("(document): not valid YAML:")
    assert "line" in problem
    assert HOST_KEY_SECRETS[0] not in problem


def test_json_syntax_errors_are_reported() -> None:
    with pytest.raises(InvalidCatalog) as caught:
        parse_document('{"hosts": [', "json")
    assert caught.value.problems[0].startswith("(document): not valid JSON:")


def test_a_yaml_alias_bomb_is_refused() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join(f"*{chr(96 + i)}" for _ in range(10)) + "]")
    raw = parse_document("\n".join(lines), "yaml")
    assert problems_of(raw)[0].endswith("too large")


def test_secret_values_never_appear_in_problems() -> None:
    doc = base_catalog()
    secret = HOST_KEY_SECRETS[0]
    doc["hosts"][0]["keys"][0]["value_env"] = "NOT_SET_ANYWHERE"
    doc["hosts"][0]["keys"].append({"name": "bad name!", "value": secret, "enabled": "maybe"})
    doc["hosts"][0]["keys"].append({"name": "k3", "value": 12345, "extra": secret})
    problems = problems_of(doc)
    assert problems
    assert not any(secret in p or "12345" in p for p in problems)


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60), ("1m", 60), ("24h", 86400), ("7d", 604800),
                                              ("500ms", 0.5), (30, 30), ("1.5s", 1.5), ("45", 45)])
def test_durations_are_parsed(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1s", "1y", "abc", True, None, "1e9s", "x" * 100])
def test_bad_durations_are_refused(text: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_durations_are_written_in_their_shortest_exact_form() -> None:
    assert [format_duration(s) for s in (60, 86400, 90, 30, 0.5, 3600 * 25)] == ["1m", "24h", "90s", "30s", "0.5s",
                                                                                  "25h"]


def test_numbers_too_large_for_the_database_are_refused() -> None:
    doc = base_catalog()
    doc["policies"][0]["rate_limits"] = [{"requests": 10**30, "per": "99999999999s"}]
    doc["policies"][0]["circuit_breaker"] = {"failures": 2**40, "cooldown": "1000d"}
    doc["models"][0]["bindings"][0]["pricing"]["input_per_mtok"] = 10**40
    assert {p.split(":")[0] for p in problems_of(doc)} == {
        "policies[0].rate_limits[0].requests", "policies[0].rate_limits[0].per",
        "policies[0].circuit_breaker.failures", "policies[0].circuit_breaker.cooldown",
        "models[0].bindings[0].pricing.input_per_mtok"}
