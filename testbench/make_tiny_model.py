"""Write the tiny test model shipped with the project: recipes/models/factory/tiny-random-llama/.

vLLM serves it with --load-format dummy (random weights), so only a config and a tokenizer are needed;
the tokenizer is trained here on a short text with the `tokenizers` library: no model hub involved.
Run: .venv/bin/pip install tokenizers && .venv/bin/python testbench/make_tiny_model.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = Path(__file__).resolve().parent.parent / "recipes" / "models" / "factory" / "tiny-random-llama"
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


def main() -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS * 20, trainer=trainer)
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,  # head_dim 64: the CPU attention kernels reject 16
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": vocab,
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
        "chat_template": CHAT_TEMPLATE,
    }
    for name, data in {"config.json": config, "tokenizer_config.json": tokenizer_config}.items():
        (OUT / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT} (vocabulary {vocab})")


if __name__ == "__main__":
    main()
