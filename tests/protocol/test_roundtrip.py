"""Codec round trips over every method of every link direction, params and results.

Values are drawn from the Structs' own field types (``msgspec.inspect``), not with
``st.from_type``: that passes a ``default_factory`` sentinel as a field value and cannot
build ``Any``/``object`` fields.
"""

from __future__ import annotations

from typing import Any

import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.envelope import (
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    encode_notification,
    encode_request,
    parse_frame,
)
from protocol.methods import DIRECTIONS, Direction, MethodSpec
from runtime.link.dispatch import encode_response

INT64 = (-(2**63), 2**63 - 1)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(*INT64) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)


def _bounded(t: mi.IntType | mi.FloatType) -> dict[str, Any]:
    low = t.ge if t.ge is not None else t.gt
    high = t.le if t.le is not None else t.lt
    bounds: dict[str, Any] = {"min_value": low, "max_value": high}
    if isinstance(t, mi.FloatType):
        bounds |= {"exclude_min": t.gt is not None, "exclude_max": t.lt is not None}
    return bounds


def strategy(t: mi.Type) -> st.SearchStrategy[Any]:
    """Values of one msgspec type, every one of which is valid for it."""
    if isinstance(t, mi.StructType):
        fields = {f.name: strategy(f.type) for f in t.fields}
        return st.builds(t.cls, **fields)
    if isinstance(t, mi.UnionType):
        return st.one_of([strategy(x) for x in t.types])
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            return st.from_regex(t.pattern, fullmatch=True)
        return st.text(min_size=t.min_length or 0, max_size=t.max_length or 12)
    if isinstance(t, mi.IntType):
        low, high = INT64
        bounds = _bounded(t)
        return st.integers(bounds["min_value"] if bounds["min_value"] is not None else low,
                           bounds["max_value"] if bounds["max_value"] is not None else high)
    if isinstance(t, mi.FloatType):
        return st.floats(allow_nan=False, allow_infinity=False, **_bounded(t))
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.ListType):
        return st.lists(strategy(t.item_type), max_size=3)
    if isinstance(t, mi.VarTupleType):
        return st.lists(strategy(t.item_type), max_size=3).map(tuple)
    if isinstance(t, mi.TupleType):
        return st.tuples(*(strategy(x) for x in t.item_types))
    if isinstance(t, mi.DictType):
        return st.dictionaries(strategy(t.key_type), strategy(t.value_type), max_size=3)
    if isinstance(t, mi.AnyType) or (isinstance(t, mi.CustomType) and t.cls is object):
        return json_values
    raise NotImplementedError(f"no strategy for {t!r}: teach this test the new type")


def _cases() -> list[Any]:
    return [pytest.param(direction, spec, id=f"{direction.name}:{spec.name}")
            for direction in DIRECTIONS for spec in direction.specs.values()]


ROUND_TRIP = settings(max_examples=25, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])
request_ids = st.integers(*INT64) | st.text(max_size=8)


@pytest.mark.parametrize(("direction", "spec"), _cases())
@ROUND_TRIP
@given(data=st.data())
def test_params_round_trip(direction: Direction, spec: MethodSpec, data: st.DataObject) -> None:
    params = data.draw(strategy(mi.type_info(spec.params)), label="params")
    if spec.is_notification:
        parsed = parse_frame(encode_notification(spec.name, params), direction)
        assert parsed == IncomingNotification(spec.name, params)
    else:
        request_id = data.draw(request_ids, label="id")
        parsed = parse_frame(encode_request(request_id, spec.name, params), direction)
        assert parsed == IncomingRequest(request_id, spec.name, params)


@pytest.mark.parametrize(("direction", "spec"),
                         [c for c in _cases() if not c.values[1].is_notification])
@ROUND_TRIP
@given(data=st.data())
def test_results_round_trip(direction: Direction, spec: MethodSpec, data: st.DataObject) -> None:
    assert spec.result is not None
    result = data.draw(strategy(mi.type_info(spec.result)), label="result")
    request_id = data.draw(request_ids, label="id")
    # The answer is read by the peer, whatever it receives: any direction parses responses.
    parsed = parse_frame(encode_response(request_id, result), direction)
    assert isinstance(parsed, IncomingResponse) and parsed.error is None
    assert parsed.id == request_id and parsed.result is not None
    assert spec.result_decoder.decode(parsed.result) == result


def test_every_type_of_the_protocol_has_a_strategy() -> None:
    # Strategies are built eagerly: a field type this test cannot draw fails here, by name.
    for direction in DIRECTIONS:
        for spec in direction.specs.values():
            for struct in (spec.params, spec.result):
                if struct is not None:
                    strategy(mi.type_info(struct))
