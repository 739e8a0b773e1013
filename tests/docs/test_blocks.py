"""How a page's shown output is compared with what its command printed (no service needed)."""

from __future__ import annotations

from tests.docs.blocks import matches


def test_json_is_shown_in_the_order_it_is_printed() -> None:
    printed = '{"probability":0.31457,"logit":-0.7788,"model":"default"}\n'
    assert matches(['{"probability":0.315,"logit":-0.779,"model":"default"}'], printed)
    assert not matches(['{"logit":-0.779,"probability":0.315,"model":"default"}'], printed)
    assert matches(['{"probability":0.315, "model":"default", ...}'], printed)
    assert not matches(['{"model":"default", "probability":0.315, ...}'], printed)
    assert not matches(['{"probability":0.315, "other":1, ...}'], printed)


def test_output_shown_on_its_own_line_ends_with_a_newline() -> None:
    # curl's JSON body has no newline: the reader's next output would run on after it.
    assert not matches(['{"accepted":1}'], '{"accepted":1}')
    assert matches(['{"accepted":1}'], '{"accepted":1}\n')
    assert matches([], "")
