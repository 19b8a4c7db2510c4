"""Data fit counts: equal to an independent count made here, and to what TRL really does."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from akka_training.engines.data import sft_examples
from akka_training.engines.datafit import PaddingMeter, pair_fit, rl_data_fit, sft_data_fit
from tests.engines.rows import image_rows, long_chat_rows, prompt_completion_rows

if TYPE_CHECKING:
    from datasets import Dataset

LIMIT = 48


@pytest.mark.slow  # it builds TRL's trainer to see what TRL drops
def test_chat_rows_counted_as_an_independent_count_and_as_trl_drops_them(
    catalog: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(catalog["tiny-chat"]["path"])
    rows = long_chat_rows(60)
    examples = sft_examples(rows, image_text=False)

    fit = sft_data_fit(examples, tokenizer, LIMIT)

    # Independently: render the prompt and the whole conversation as text, tokenise both; the
    # answer runs from the end of the prompt to the end-of-turn token (the template's last
    # newline is not part of it).
    truncated = answers = dropped = 0
    for row in rows:
        messages = row["messages"]
        prompt = tokenizer.apply_chat_template(
            messages[:-1], tokenize=False, add_generation_prompt=True
        )
        whole = tokenizer.apply_chat_template(messages, tokenize=False)
        start = len(tokenizer(prompt)["input_ids"])
        length = len(tokenizer(whole)["input_ids"])
        end = length - 1
        truncated += length > LIMIT
        if start >= LIMIT:
            dropped += 1
        elif end > LIMIT:
            answers += 1
    assert (fit.rows, fit.rows_truncated, fit.answers_truncated, fit.rows_dropped) == (
        60,
        truncated,
        answers,
        dropped,
    )
    assert 0 < fit.rows_dropped < fit.rows_truncated < fit.rows
    assert fit.answers_truncated > 0

    kept = _trl_prepared(tokenizer, examples, tmp_path, assistant_only=True)
    assert len(kept) == fit.rows - fit.rows_dropped
    assert sum(len(ids) == LIMIT for ids in kept["input_ids"]) == fit.rows_truncated - dropped


@pytest.mark.slow  # it builds TRL's trainer to see what TRL drops
def test_prompt_completion_rows_counted_as_trl_drops_them(
    catalog: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(catalog["tiny-chat"]["path"])
    examples = sft_examples(prompt_completion_rows(60), image_text=False)

    fit = sft_data_fit(examples, tokenizer, 24)

    assert fit.rows_dropped > 0
    kept = _trl_prepared(tokenizer, examples, tmp_path, assistant_only=False, limit=24)
    assert len(kept) == fit.rows - fit.rows_dropped


def test_image_rows_count_image_tokens_and_drop_nothing(
    catalog: dict[str, dict[str, Any]],
) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(catalog["tiny-vision"]["path"])
    examples = sft_examples(image_rows(4), image_text=True)

    roomy = sft_data_fit(examples, processor, 512)
    tight = sft_data_fit(examples, processor, 30)

    assert (roomy.rows_truncated, roomy.answers_truncated, roomy.rows_dropped) == (0, 0, 0)
    # The prompt alone (template, image soft tokens, question) is about 30 tokens: every answer
    # is cut, and TRL's vision collator drops no row.
    assert (tight.rows_truncated, tight.answers_truncated, tight.rows_dropped) == (4, 4, 0)


def test_rl_prompts_that_leave_no_room_for_a_completion_are_dropped() -> None:
    fit, keep = rl_data_fit([10, 30, 31, 50], max_seq_length=64, max_completion_tokens=34)

    assert keep == [True, True, False, False]
    assert fit.to_report() == {
        "rows": 4,
        "rowsTruncated": 2,
        "answersTruncated": 0,
        "rowsDropped": 2,
        "maxSeqLength": 64,
    }


def test_padding_meter_reports_each_steps_batches() -> None:
    import torch

    def collate(lengths: list[int]) -> dict[str, Any]:
        width = max(lengths)
        mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
        return {"attention_mask": mask}

    meter = PaddingMeter(collate)
    meter([4, 2])  # step 1, batch 1: 6 of 8 slots
    meter([3, 3])  # step 1, batch 2: 6 of 6
    meter([1, 4])  # step 2 (prefetched): 5 of 8

    assert meter.take(2) == pytest.approx((12, 1 - 12 / 14))
    assert meter.take(2) == pytest.approx((5, 1 - 5 / 8))
    assert meter.take(1) == (0, None)


def _trl_prepared(
    tokenizer: Any,
    examples: list[dict[str, Any]],
    tmp_path: Path,
    *,
    assistant_only: bool,
    limit: int = LIMIT,
) -> Dataset:
    """The training set TRL really builds from the examples."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    path = tokenizer.name_or_path
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(path),
        args=SFTConfig(
            output_dir=str(tmp_path / "trl"),
            max_length=limit,
            assistant_only_loss=assistant_only,
            bf16=False,
            use_cpu=True,
            report_to=[],
        ),
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
    )
    return trainer.train_dataset


def test_pairs_count_prompts_cut_answers_cut_and_pairs_dropped() -> None:
    # (prompt, chosen, rejected) tokens of the pairs TRL kept; one of five pairs was dropped.
    lengths = [(10, 5, 5), (30, 5, 9), (20, 30, 10), (40, 20, 2)]
    fit = pair_fit(5, lengths, max_length=48, max_prompt_length=24)
    assert fit.to_report() == {
        "rows": 5,
        # 20 + 30 and 40 + 20 pass 48, and the dropped pair's prompt alone filled it.
        "rowsTruncated": 3,
        # Once prompts keep their last 24 tokens, only 20 + 30 still passes 48.
        "answersTruncated": 1,
        "rowsDropped": 1,
        "maxSeqLength": 48,
        "promptsTruncated": 2,
    }


@pytest.mark.slow  # TRL's own padding-free collator
def test_a_padding_free_batch_counts_every_token_and_no_padding() -> None:
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    meter = PaddingMeter(DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True))
    meter([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    meter([{"input_ids": [5]}, {"input_ids": [8, 9, 10, 11]}])

    assert meter.take(2) == (10, 0.0)
