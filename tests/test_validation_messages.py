"""The one mapping of pydantic's validation errors: the field as a dotted path and the
validator's own words, as a person reads them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from j2c_server.core.errors import InvalidInput, validation_error_to_j2c
from j2c_server.wire.api import JobRequest


def _refusal(**request: object) -> InvalidInput:
    with pytest.raises(ValidationError) as caught:
        JobRequest.model_validate({"code_path": "p", "call_path": "train.py", **request})
    error = validation_error_to_j2c(caught.value)
    assert isinstance(error, InvalidInput)
    return error


def test_a_bad_key_of_a_mapping_is_named_by_its_path_without_pydantics_markers() -> None:
    error = _refusal(sweep={"grid": {"1lr": ["1"]}})
    assert error.field == "sweep.grid.1lr"
    assert error.message == (
        "sweep.grid.1lr: '1lr' is not a parameter name (letters, digits and '_', not "
        "starting with a digit)"
    )


def test_a_bound_is_said_in_pydantics_words_with_the_field() -> None:
    error = _refusal(sweep={"grid": {"lr": ["1"]}, "retries": 11})
    assert error.field == "sweep.retries"
    assert error.message == "sweep.retries: Input should be less than or equal to 10"
