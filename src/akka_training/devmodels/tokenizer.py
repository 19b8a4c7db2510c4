"""The development tokenizer: byte-level BPE trained on the fly, with digits split one by one (so
that arithmetic answers tokenise digit by digit), and the chat template both models use.

The template is ChatML-shaped. Assistant turns sit inside ``{% generation %}`` markers, end of
turn included, so TRL's ``assistant_only_loss`` trains the model to stop; tool declarations and
tool calls render in the ``<tool_call>{json}</tool_call>`` form that `RESPONSE_TEMPLATE` parses
back; an image part renders as the vision model's begin-of-image token, which its processor
expands into the image's soft tokens.
"""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from akka_training.devmodels.corpus import corpus

PAD = "<|pad|>"
BOS = "<|bos|>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
IMAGE_START = "<start_of_image>"
IMAGE_END = "<end_of_image>"
IMAGE_SOFT = "<image_soft_token>"
SPECIAL_TOKENS = (PAD, BOS, TURN_START, TURN_END, IMAGE_START, IMAGE_END, IMAGE_SOFT)

VOCAB_SIZE = 1024

NL = "{{ '\\n' }}"
CHAT_TEMPLATE = "".join(
    [
        "{%- macro text(content) -%}",
        "{%- if content is string -%}{{ content }}",
        "{%- elif content -%}{%- for part in content -%}",
        "{%- if part.type == 'image' -%}" + IMAGE_START,
        "{%- elif part.type == 'text' -%}{{ part.text }}",
        "{%- endif -%}{%- endfor -%}{%- endif -%}",
        "{%- endmacro -%}",
        # Tools: declared in the system turn, which then also carries the system message.
        "{%- if tools -%}",
        "<|im_start|>system" + NL,
        "{%- if messages[0].role == 'system' -%}{{ text(messages[0].content) }}" + NL + NL,
        "{%- endif -%}",
        'You may call these tools; answer a call as <tool_call>{"name": ..., "arguments": {...}}',
        "</tool_call>." + NL + "<tools>" + NL,
        "{%- for tool in tools -%}{{ tool | tojson }}" + NL + "{%- endfor -%}",
        "</tools><|im_end|>" + NL,
        "{%- endif -%}",
        "{%- for message in messages -%}",
        "{%- if message.role == 'system' -%}",
        "{%- if not tools -%}<|im_start|>system" + NL,
        "{{- text(message.content) }}<|im_end|>" + NL + "{%- endif -%}",
        "{%- elif message.role == 'assistant' -%}",
        "<|im_start|>assistant" + NL + "{%- generation -%}{{ text(message.content) }}",
        "{%- for call in message.tool_calls or [] -%}",
        "{%- set call = call.function if call.function is defined else call -%}",
        "<tool_call>{{ {'name': call.name, 'arguments': call.arguments} | tojson }}</tool_call>",
        "{%- endfor -%}",
        "<|im_end|>{%- endgeneration -%}" + NL,
        "{%- else -%}",
        "<|im_start|>{{ message.role }}" + NL + "{{- text(message.content) }}<|im_end|>" + NL,
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}<|im_start|>assistant" + NL + "{%- endif -%}",
    ]
)

# How `tokenizer.parse_response` reads an assistant turn back into content and tool calls
# (transformers' response-template format), so TRL's GRPO tool loop can run the calls.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def train_tokenizer() -> Tokenizer:
    """Train the byte-level BPE model on the embedded corpus (deterministic)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    return tokenizer


def wrap_tokenizer(tokenizer: Tokenizer, *, vision: bool) -> PreTrainedTokenizerFast:
    """The Hugging Face tokenizer around the trained model, with the chat template and the
    response template; the vision model's names its image tokens too."""
    extra: dict[str, str] = {}
    if vision:
        extra = {"image_token": IMAGE_SOFT, "boi_token": IMAGE_START, "eoi_token": IMAGE_END}
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=TURN_END,
        pad_token=PAD,
        extra_special_tokens=extra or None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
        padding_side="right",
        response_template=RESPONSE_TEMPLATE,
    )
    return wrapped
