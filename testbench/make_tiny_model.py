"""Write the tiny test models shipped with the project: recipes/models/factory/tiny-random-llama/ (a chat
model) and recipes/models/factory/tiny-random-embedding/ (an embedding model).

vLLM serves them with --load-format dummy (random weights), so only a config and a tokenizer are needed;
the tokenizer is trained here on a short text with the `tokenizers` library: no model hub involved. Both
models share it; the embedding model's architecture is `LlamaModel` (no language-model head), which vLLM
0.32.0 serves as an embedding model with `--runner pooling --convert embed` (its recipe carries them).
Run: .venv/bin/pip install tokenizers && .venv/bin/python testbench/make_tiny_model.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

MODELS = Path(__file__).resolve().parent.parent / "recipes" / "models" / "factory"
SPECIALS = ["<unk>", "<s>", "</s>"]
CORPUS = [
    "The image factory turns serving recipes into tested container images.",
    "Hello! How are you today? I am a tiny language model with random weights.",
    "vLLM serves models through an OpenAI compatible API: chat completions, models, health.",
    "user assistant system tool: the quick brown fox jumps over the lazy dog 0123456789.",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Per model: its architecture and width, and whether it chats. head_dim is 64 in both: the CPU attention
# kernels reject 16. The embedding model is wider than the chat model so that the length of the vector
# validation receives (its hidden size) can only come from its own config.
SHAPES: dict[str, dict[str, Any]] = {
    "tiny-random-llama": {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "chat": True,
    },
    "tiny-random-embedding": {
        "architectures": ["LlamaModel"],
        "hidden_size": 384,
        "intermediate_size": 768,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "chat": False,
    },
}


def train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tokenizer


def write_model(out: Path, tokenizer: Tokenizer, shape: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "architectures": shape["architectures"],
        "model_type": "llama",
        "hidden_size": shape["hidden_size"],
        "intermediate_size": shape["intermediate_size"],
        "num_attention_heads": shape["num_attention_heads"],
        "num_key_value_heads": shape["num_key_value_heads"],
        "num_hidden_layers": 2,
        "vocab_size": tokenizer.get_vocab_size(),
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.token_to_id("<s>"),
        "eos_token_id": tokenizer.token_to_id("</s>"),
        "torch_dtype": "bfloat16",
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 512,
    }
    if shape["chat"]:
        tokenizer_config["chat_template"] = CHAT_TEMPLATE
    for name, data in {"config.json": config, "tokenizer_config.json": tokenizer_config}.items():
        (out / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out} (vocabulary {tokenizer.get_vocab_size()})")


def main() -> None:
    tokenizer = train_tokenizer()
    for name, shape in SHAPES.items():
        write_model(MODELS / name, tokenizer, shape)


if __name__ == "__main__":
    main()
