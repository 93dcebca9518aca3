"""Component configs of the two synthetic models: `tiny` (seconds per video on a CPU) and `a14b-synthetic`
(the real Wan2.2-T2V-A14B architecture), plus the tokenizer both build in-process and the tiny prompts."""
from __future__ import annotations

from typing import Any

TINY_PROMPTS = (
    "a red fox running through fresh snow",
    "a lighthouse on a cliff at sunset, waves crashing",
    "a cup of coffee steaming on a wooden table",
    "a paper boat drifting down a rainy street",
)

TINY: dict[str, dict[str, Any]] = {
    "text_encoder": dict(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                         relative_attention_num_buckets=8, relative_attention_max_distance=32),
    # attention_head_dim 32: MX formats quantise head_dim in blocks of 32.
    "transformer": dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=16,
                        out_channels=16, text_dim=32, freq_dim=32, ffn_dim=128, num_layers=2, cross_attn_norm=True,
                        qk_norm="rms_norm_across_heads", rope_max_seq_len=1024),
    "vae": dict(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                temperal_downsample=[False, True, True]),
}

# Wan2.2-T2V-A14B: the checkpoint's transformer config, the UMT5-XXL encoder and the Wan2.1 VAE defaults.
A14B: dict[str, dict[str, Any]] = {
    "text_encoder": dict(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                         relative_attention_num_buckets=32, relative_attention_max_distance=128,
                         feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6),
    "transformer": dict(patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=16,
                        out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40,
                        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024),
    "vae": dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                temperal_downsample=[False, True, True]),
}

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {"tiny": TINY, "a14b-synthetic": A14B}


def build_tokenizer() -> Any:
    """A Unigram tokenizer over a fixed corpus, wrapped for transformers (no download).

    Built from counted pieces rather than trained: `UnigramTrainer` breaks score ties in hash order, so two builds
    (two ranks of `fsbench run --gpus N`) got different vocabularies and so different prompt embeddings.
    Pieces: the special tokens, every corpus word (as Metaspace marks it, scored by frequency), every character.
    """
    import math
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    corpus = list(TINY_PROMPTS) + [
        "the quick brown fox jumps over the lazy dog near a quiet river",
        "vivid colors, overexposed, static, blurry details, subtitles, worst quality, low quality",
        "a cat, a dog, a bird, a car, a city at night, mountains, ocean, forest, people walking",
    ]
    words = Counter("\u2581" + word for line in corpus for word in line.split())
    chars = sorted({c for word in words for c in word})
    total = sum(words.values())
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(word, math.log(n / total)) for word, n in sorted(words.items(), key=lambda item: (-item[1], item[0]))]
    vocab += [(c, math.log(0.5 / total) - 4) for c in chars if c not in words]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
