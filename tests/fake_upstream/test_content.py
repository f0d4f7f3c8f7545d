"""Reply text and token counts are deterministic, so tests can compute what to expect."""

from __future__ import annotations

from devtools.fake_upstream import count_tokens, embedding_inputs, plan_turn, prompt_of
from devtools.fake_upstream.wire import reply_pieces


def test_count_tokens_is_a_quarter_of_the_characters_rounded_up_and_at_least_one() -> None:
    assert count_tokens("") == 1
    assert count_tokens("abc") == 1
    assert count_tokens("abcd") == 1
    assert count_tokens("abcde") == 2
    assert count_tokens("x" * 400) == 100


def test_prompt_joins_system_and_every_message() -> None:
    body = {"system": [{"type": "text", "text": "S"}],
            "messages": [{"role": "user", "content": "A"},
                         {"role": "assistant", "content": [{"type": "text", "text": "B"}]},
                         {"role": "user", "content": [{"type": "text", "text": "C"}, {"type": "text", "text": "D"}]}]}
    assert prompt_of("messages", body) == ("S\nA\nB\nC\nD", "C\nD")


def test_responses_prompt_takes_instructions_and_input_items() -> None:
    assert prompt_of("responses", {"instructions": "I", "input": "Q"}) == ("I\nQ", "Q")
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q1"}]},
             {"type": "function_call_output", "call_id": "c", "output": "R"}]
    assert prompt_of("responses", {"input": items}) == ("Q1\nR", "Q1")


def test_reply_echoes_the_last_user_message_or_says_ok() -> None:
    body = {"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"},
                         {"role": "user", "content": "second"}]}
    assert plan_turn("chat", body).reply == "second"
    assert plan_turn("chat", {"messages": [{"role": "system", "content": "s"}]}).reply == "ok"


def test_output_limit_truncates_to_four_characters_per_token() -> None:
    turn = plan_turn("chat", {"max_tokens": 2, "messages": [{"role": "user", "content": "abcdefghijkl"}]})
    assert (turn.reply, turn.truncated, turn.output_tokens) == ("abcdefgh", True, 2)
    assert not plan_turn("messages", {"max_tokens": 3, "messages": [{"role": "user", "content": "abcd"}]}).truncated


def test_usage_overrides_replace_single_counts() -> None:
    turn = plan_turn("messages", {"messages": [{"role": "user", "content": "hello"}]},
                     usage={"input_tokens": 50, "cached_tokens": 20, "cache_creation_tokens": 5})
    assert (turn.input_tokens, turn.uncached_input_tokens, turn.output_tokens) == (50, 25, 2)


def test_embedding_inputs_accept_strings_and_token_arrays() -> None:
    assert embedding_inputs({"input": "a"}) == ["a"]
    assert embedding_inputs({"input": ["a", "b"]}) == ["a", "b"]
    assert embedding_inputs({"input": [1, 2]}) == ["1 2"]
    assert embedding_inputs({"input": [[1, 2], [3]]}) == ["1 2", "3"]


def test_reply_pieces_join_back_to_the_reply() -> None:
    for text in ("", "one", "one two three", "  spaced   out  text ", "line\nbreaks\n"):
        assert "".join(reply_pieces(text)) == text
