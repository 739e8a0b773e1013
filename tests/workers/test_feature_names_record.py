"""``feature_names.lua`` through :class:`FeatureNames`: bounded, first name kept, nothing
written for a deleted model or a malformed call (a real Redis)."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from online_ctr.store.feature_names import FeatureNames, Recorded, field
from tests.workers.conftest import MakeStore

pytestmark = pytest.mark.anyio


async def test_names_are_kept_first_and_refused_past_the_limit(make_store: MakeStore) -> None:
    store = await make_store()
    names = FeatureNames(store.redis, store.keys, most=3)
    assert await names.record([1, 2], [b"a=1", b"b=2"]) == Recorded(2, 0)
    # Id 2 again with another name (a collision): the first stays; 3 fits; 4 and 5 do not.
    done = await names.record([2, 3, 4, 5], [b"other", b"c=3", b"d=4", b"e=5"])
    assert done == Recorded(1, 2)
    assert await names.names_of([1, 2, 3, 4]) == ["a=1", "b=2", "c=3", None]
    assert await names.held() == 3
    assert await names.record([1, 5], [b"a=1", b"e=5"]) == Recorded(0, 1)  # 1 is there


async def test_a_deleted_model_gets_no_record(make_store: MakeStore) -> None:
    store = await make_store()
    await store.delete()
    names = FeatureNames(store.redis, store.keys, most=10)
    assert await names.record([1], [b"a=1"]) == Recorded(gone=True)
    assert not await store.redis.exists(store.keys.feature_names)


async def test_a_malformed_call_writes_nothing(make_store: MakeStore) -> None:
    store = await make_store()
    names = FeatureNames(store.redis, store.keys, most=10)
    script = names._script
    keys = [store.keys.feature_names, store.keys.meta]
    for args in (
        [10, field(1), b"\x03\x00\x03\x00", b"a=1b=2"],  # two lengths for one id
        [10, field(1), b"\x05\x00", b"a=1"],  # the names are shorter than said
        ["ten", field(1), b"\x03\x00", b"a=1"],
    ):
        with pytest.raises(ResponseError, match=r"^feature_names: "):
            await script(keys=keys, args=args)
    assert not await store.redis.exists(store.keys.feature_names)
