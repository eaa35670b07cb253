"""`errors.check_bounds`: the one check of configured limits, naming the first setting out of its bounds."""

from __future__ import annotations

import pytest

from docqa.components.contre_tree_expander import MAX_DEPTH, ConTReTreeExpander
from docqa.errors import check_bounds
from docqa.run_control import RunControl


def test_values_within_their_bounds_pass() -> None:
    check_bounds(depth=(1, 1, 4), breadth=(4, 1, 4), tokens=(16, 16, None))


@pytest.mark.parametrize(("bounds", "message"), [
    ({"depth": (0, 1, 4)}, "depth must be between 1 and 4"),
    ({"depth": (5, 1, 4)}, "depth must be between 1 and 4"),
    ({"tokens": (15, 16, None)}, "tokens must be at least 16"),
    ({"calls": (1, 1, None), "chars": (0, 1, None)}, "chars must be at least 1"),
])
def test_the_first_value_out_of_bounds_is_named(bounds, message) -> None:
    with pytest.raises(ValueError, match=message):
        check_bounds(**bounds)


def test_the_expander_and_the_run_control_reject_their_limits_by_name() -> None:
    with pytest.raises(ValueError, match=f"max_depth must be between 1 and {MAX_DEPTH}"):
        ConTReTreeExpander(chat_generator=None, max_depth=MAX_DEPTH + 1)
    with pytest.raises(ValueError, match="max_passage_chars must be at least 50"):
        ConTReTreeExpander(chat_generator=None, max_passage_chars=49)
    with pytest.raises(ValueError, match="max_prompt_chars must be at least 1"):
        RunControl(max_llm_calls=1, max_completion_tokens=1, max_prompt_chars=0)
