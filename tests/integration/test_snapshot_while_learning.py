"""An export taken through the real API while the real worker learns the Criteo file is the
model's exact state at one step: the in-process replay of exactly that many examples."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

import numpy as np

from online_ctr.client import Client
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from online_ctr.learning.snapshot import Footer, RowChunk
from online_ctr.learning.snapshot_reader import Reader
from testkit.paths import CRITEO
from tests.integration.conftest import Service

ROWS = list(read_examples(CRITEO, "criteo"))  # the whole file: 10,000 examples


def unpack(blob: bytes) -> tuple[dict[int, np.ndarray], Footer]:
    """The file's state by id (later rows replace earlier ones) and its footer."""
    reader = Reader()
    state: dict[int, np.ndarray] = {}
    for item in reader.feed(blob):
        if isinstance(item, RowChunk):
            state.update(zip(item.ids.tolist(), item.state, strict=True))
    return state, reader.close()


def test_exports_while_the_worker_learns_are_each_one_steps_state(
    redis_url: str, start_service: Callable[..., Service]
) -> None:
    # Small commits, many buckets: commits land while an export scans.
    service = start_service(redis_url, OCTR_BATCH_SIZE="25", OCTR_STATE_BUCKETS="4096")
    with Client(service.api_url, max_batch=50) as client:
        feeding = threading.Thread(target=client.learn_many, args=(ROWS,))
        feeding.start()
        blobs = []
        while not blobs or unpack(blobs[-1])[1].t < len(ROWS):
            out = io.BytesIO()
            client.export_model("default", out)
            blobs.append(out.getvalue())
        feeding.join()
    footers = [unpack(blob)[1] for blob in blobs]
    spanning = [i for i, f in enumerate(footers) if f.source["seq"] > f.source["pinned_seq"]]
    assert len(spanning) >= 2, "too few exports spanned a commit to test rolling forward"
    rule = get_rule("ftrl")
    for index in spanning[:: max(1, len(spanning) // 5)]:
        state, footer = unpack(blobs[index])
        assert 0 < footer.t <= len(ROWS)
        model = InMemoryModel(rule, rule.params())
        replay(ROWS[: footer.t], model, FeatureHasher(), batch_size=1)
        expected = model.snapshot()
        assert state.keys() == expected.keys()
        order = sorted(state)
        got = np.array([state[f] for f in order])
        want = np.array([expected[f][:-1] for f in order])
        np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))  # bit for bit
        assert footer.nonzero_weights == model.nonzero_weights()
        assert footer.features_tracked == model.features_tracked()
