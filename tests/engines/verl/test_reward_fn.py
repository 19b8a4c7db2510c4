"""Our reward function as verl 0.9.1 calls it: loaded with verl's ``get_custom_reward_fn`` and
called through its ``NaiveRewardManager.run_single`` (the reward loop's per-rollout call), in
verl's environment, on token ids as vLLM would return them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from akka_training.engines.verl.data import write_verl_dataset
from akka_training.engines.verl.records import RecordReader, setup_error
from akka_training.engines.verl.reward_config import RewardConfig
from tests.engines.verl.conftest import FIXTURES, VerlEnv

# Runs verl's own environment (.venv-verl).
pytestmark = pytest.mark.slow

CALL_AS_VERL = """
import asyncio, json, sys
import numpy as np, pyarrow.parquet as pq, torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.reward import get_custom_reward_fn

data_file, config_file, tokenizer_dir = sys.argv[1:4]
completions = json.loads(sys.argv[4])
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
config = OmegaConf.create({"reward": {"custom_reward_function": {
    "path": "pkg://akka_training.engines.verl.reward_fn", "name": "compute_score",
    "reward_kwargs": {"akka_reward_config": config_file}}}})
manager = NaiveRewardManager(config, tokenizer, get_custom_reward_fn(config))
row = pq.read_table(data_file).to_pylist()[0]
prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                       return_dict=False)
results = []
for text in completions:
    response = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + response])
    sample = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt]), "responses": torch.tensor([response]),
                 "input_ids": ids, "attention_mask": torch.ones_like(ids)},
        non_tensors={"data_source": np.array([row["data_source"]], dtype=object),
                     "reward_model": np.array([row["reward_model"]], dtype=object),
                     "extra_info": np.array([dict(row["extra_info"])], dtype=object)})
    try:
        results.append(asyncio.get_event_loop().run_until_complete(manager.run_single(sample)))
    except Exception as exc:
        results.append({"error": f"{type(exc).__name__}: {exc}"})
print(json.dumps(results, default=float))
"""
TERMS = [
    {"name": "correct", "kind": "match", "weight": 1.0, "mode": "final-number"},
    {"name": "format", "kind": "regex", "weight": 0.2, "pattern": "#### -?[0-9]+$"},
    {
        "name": "short",
        "kind": "length",
        "weight": -0.5,
        "minTokens": 0,
        "maxTokens": 4,
        "slackTokens": 4,
    },
]


def call_as_verl(
    verl_env: VerlEnv, tmp_path: Path, terms: list[dict[str, Any]], completions: list[str]
) -> list[dict[str, Any]]:
    rows = [
        {
            "messages": [
                {"role": "user", "content": "What is 2 + 3?"},
                {"role": "assistant", "content": "#### 5"},
            ]
        }
    ]
    written = write_verl_dataset(
        rows, tmp_path / "train.parquet", data_source="maths/train", split="train"
    )
    config = RewardConfig(
        terms=terms,
        max_concurrency=4,
        bundles={},
        tokenizer=str(FIXTURES / "tokenizer"),
        max_response_length=6,
        records=str(tmp_path / "records"),
    ).write(tmp_path / "reward.json")
    done = verl_env.run(
        [
            "-c",
            CALL_AS_VERL,
            str(written.path),
            str(config),
            str(FIXTURES / "tokenizer"),
            json.dumps(completions),
        ]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    scored: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return scored


def test_verl_gets_the_score_and_each_term(verl_env: VerlEnv, tmp_path: Path) -> None:
    results = call_as_verl(
        verl_env, tmp_path, TERMS, ["#### 5", "it is 6", "#### 5 #### 5 #### 5 #### 5"]
    )
    good, wrong, long = (r["reward_extra_info"] for r in results)
    assert results[0]["reward_score"] == good["score"]
    assert good["term/correct"] == 1.0 and good["term/format"] == 1.0
    assert wrong["term/correct"] == 0.0 and wrong["term/format"] == 0.0
    # A negative weight penalises length outside the range: the term is 0 inside it and rises
    # past maxTokens, so the long completion's score drops by its share.
    assert good["term/short"] == 0.0 and long["term/short"] > 0.0
    assert long["score"] < good["score"]
    records = RecordReader(tmp_path / "records").new_records()
    assert [r.completion for r in records] == ["#### 5", "it is 6", "#### 5 #### 5 #### 5 #### 5"]
    first = records[0]
    assert first.prompt == [{"role": "user", "content": "What is 2 + 3?"}]
    assert (first.expected, first.split, first.index) == ("#### 5", "train", 0)
    assert first.score == results[0]["reward_score"]
    assert first.shares["format"] == 0.2 * first.values["format"]
    assert set(first.term_seconds) == {"correct", "format", "short"}
    assert (
        first.finish_reason == "stop" and records[2].finish_reason == "length"
    )  # 6 tokens at most
    assert first.seconds > 0 and first.started > 0


def test_terms_that_cannot_run_leave_a_note(verl_env: VerlEnv, tmp_path: Path) -> None:
    broken = [{"name": "format", "kind": "regex", "weight": 1.0, "pattern": "(unclosed"}]
    results = call_as_verl(verl_env, tmp_path, broken, ["#### 5"])
    assert "error" in results[0]
    note = setup_error(tmp_path / "records")
    assert note is not None and "format" in note
