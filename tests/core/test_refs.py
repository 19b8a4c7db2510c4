import pytest

from akka_training.core.refs import BadReference, parse_ref, stage_of


def test_reference_forms() -> None:
    assert parse_ref("maths/train").version is None
    assert parse_ref("maths/train:v3").version == 3
    assert parse_ref("maths/train:best").alias == "best"
    assert parse_ref("maths/train@sha256:abcdef12").digest == "abcdef12"
    assert str(parse_ref("maths/train:v3")) == "maths/train:v3"
    assert stage_of("@sft") == "sft"
    assert stage_of("maths/train") is None


def test_a_bad_reference_says_how_to_write_one() -> None:
    with pytest.raises(BadReference, match="PROJECT/NAME:vN"):
        parse_ref("train")
