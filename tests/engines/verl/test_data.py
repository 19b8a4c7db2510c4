"""Datasets in verl's Parquet layout, read back with pyarrow and with verl's own RLHFDataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from akka_training.engines.verl.data import (
    DatasetRowError,
    read_jsonl,
    split_row,
    write_verl_dataset,
)
from tests.engines.verl.conftest import VerlEnv

ROWS: list[dict[str, Any]] = [
    {
        "messages": [
            {"role": "system", "content": "Answer with #### and a number."},
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "#### 5"},
        ]
    },
    {"prompt": "What is 7 x 6?", "completion": "#### 42"},
    {
        "prompt": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Name a "},
                    {"type": "text", "text": "prime."},
                ],
            }
        ],
        "completion": [{"role": "assistant", "content": "#### 7"}],
    },
    {"messages": [{"role": "user", "content": "Say something."}]},
]


def test_rows_become_verl_rows(tmp_path: Path) -> None:
    written = write_verl_dataset(
        ROWS, tmp_path / "train.parquet", data_source="maths/train", split="train"
    )
    assert (written.rows, written.without_answer) == (4, 1)
    table = pq.read_table(written.path)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = table.to_pylist()
    assert rows[0]["data_source"] == "maths/train"
    assert rows[0]["prompt"] == [
        {"role": "system", "content": "Answer with #### and a number."},
        {"role": "user", "content": "What is 2 + 3?"},
    ]
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "#### 5"}
    assert rows[1]["prompt"] == [{"role": "user", "content": "What is 7 x 6?"}]
    assert rows[1]["reward_model"]["ground_truth"] == "#### 42"
    assert rows[2]["prompt"] == [{"role": "user", "content": "Name a prime."}]
    assert rows[2]["reward_model"]["ground_truth"] == "#### 7"
    assert rows[3]["reward_model"]["ground_truth"] is None
    extra = rows[1]["extra_info"]
    assert (extra["index"], extra["split"]) == (1, "train")
    assert json.loads(extra["prompt"]) == rows[1]["prompt"]
    assert json.loads(extra["row"]) == ROWS[1]


def test_last_assistant_message_is_the_answer() -> None:
    prompt, expected = split_row(
        {
            "messages": [
                {"role": "user", "content": "1?"},
                {"role": "assistant", "content": "one"},
                {"role": "user", "content": "2?"},
                {"role": "assistant", "content": "two"},
            ]
        }
    )
    assert expected == "two"
    assert [m["content"] for m in prompt] == ["1?", "one", "2?"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"text": "hello"}, "row 1: a row needs 'messages'"),
        (
            {
                "messages": [
                    {"role": "system", "content": "x"},
                    {"role": "assistant", "content": "y"},
                ]
            },
            "no user message",
        ),
    ],
)
def test_rows_without_a_prompt_are_refused(
    tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    with pytest.raises(DatasetRowError, match=message):
        write_verl_dataset([row], tmp_path / "t.parquet", data_source="d", split="train")
    assert not (tmp_path / "t.parquet").exists()


def test_jsonl_lines_are_read_and_a_broken_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[1]) + "\n\n" + "{broken\n")
    rows = read_jsonl(path)
    assert next(rows) == ROWS[1]
    with pytest.raises(DatasetRowError, match="line 3 is not JSON"):
        next(rows)


VERL_READS = """
import json, sys
from omegaconf import OmegaConf
from verl.utils.dataset.rl_dataset import RLHFDataset
config = OmegaConf.create({"filter_overlong_prompts": False, "max_prompt_length": 64,
                           "cache_dir": sys.argv[2]})
dataset = RLHFDataset(data_files=sys.argv[1], tokenizer=None, config=config)
rows = []
for i in range(len(dataset)):
    row = dataset[i]
    rows.append({"raw_prompt": row["raw_prompt"], "index": int(row["index"]),
                 "ground_truth": row["reward_model"]["ground_truth"],
                 "data_source": row["data_source"], "extra_info": row["extra_info"]})
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_verl_reads_the_layout(verl_env: VerlEnv, tmp_path: Path) -> None:
    written = write_verl_dataset(
        ROWS, tmp_path / "train.parquet", data_source="maths/train", split="train"
    )
    done = verl_env.run(
        ["-c", VERL_READS, str(written.path), str(tmp_path / "cache")],
        env={"HF_DATASETS_CACHE": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["raw_prompt"][1] == {"role": "user", "content": "What is 2 + 3?"}
    assert rows[1]["ground_truth"] == "#### 42"
    assert rows[3]["ground_truth"] is None
    assert rows[2]["data_source"] == "maths/train"
    assert json.loads(rows[2]["extra_info"]["row"]) == ROWS[2]
