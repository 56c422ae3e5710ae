"""The wrapper's module handling (needs vLLM, no engine)."""


def test_bidirectional_image_attention_is_detected(zoo):
    """Gemma3 reads token_type_ids for its image mask, which vLLM's attention cannot do."""
    from transformers import AutoConfig

    from hf_bridge.bidirectional import uses_bidirectional_mm_attention

    assert uses_bidirectional_mm_attention(AutoConfig.from_pretrained(zoo("gemma3")))
    for arch in ("llava", "qwen2_vl", "idefics3"):
        assert not uses_bidirectional_mm_attention(AutoConfig.from_pretrained(zoo(arch)))
    # Gemma 4 says so in its text config; its forward reads `mm_token_type_ids`, as
    # Qwen3-VL's does for M-RoPE, so the signature cannot tell
    assert uses_bidirectional_mm_attention(AutoConfig.for_model("gemma4_unified"))
    assert not uses_bidirectional_mm_attention(AutoConfig.for_model("qwen3_vl"))
    # Gemma 3n's forward takes `token_type_ids`, as Gemma 3's does, and never reads them: its
    # images attend causally (taken both ways, its one-image prompt log-probs were 1.07 off)
    assert not uses_bidirectional_mm_attention(AutoConfig.for_model("gemma3n"))


def test_attention_over_the_whole_prompt_is_read_from_transformers_own_mask(zoo):
    """PaliGemma's mask joins every text-typed prompt token in one block (its prefix);
    Gemma3's, which reads token_type_ids too, joins image tokens only, and a class without
    such a mask hook attends causally."""
    from transformers import AutoConfig

    from hf_bridge.bidirectional import attends_across_prompt

    assert attends_across_prompt(AutoConfig.from_pretrained(zoo("paligemma")))
    config = AutoConfig.from_pretrained(zoo("paligemma"))
    config.text_config.sliding_window = 4  # PaliGemma 2's Gemma2 text model: both masks say so
    assert attends_across_prompt(config)
    for arch in ("gemma3", "llava", "qwen2_vl"):
        assert not attends_across_prompt(AutoConfig.from_pretrained(zoo(arch)))
    assert not attends_across_prompt(AutoConfig.for_model("gemma4_unified"))


def test_a_prompt_escapes_the_window_only_where_a_window_and_a_prompt_block_both_exist(zoo):
    """PaliGemma 2's sliding layers let its prompt see all of itself (see
    `test_cpu_media_attention.py`); PaliGemma has no window, and Gemma3's text is causal."""
    from transformers import AutoConfig

    from hf_bridge.bidirectional import prompt_escapes_window

    for arch in ("paligemma", "gemma3"):
        assert not prompt_escapes_window(AutoConfig.from_pretrained(zoo(arch)))


def test_the_reference_runs_eager_attention_exactly_where_attention_is_soft_capped():
    from transformers import Gemma2Config, LlavaConfig, PaliGemmaConfig

    from hf_bridge.validate.parity import reference_attention

    assert reference_attention(PaliGemmaConfig(text_config=Gemma2Config())) == {"attn_implementation": "eager"}
    assert reference_attention(PaliGemmaConfig(text_config=Gemma2Config(attn_logit_softcapping=None))) == {}
    assert reference_attention(LlavaConfig()) == {}


def test_logits_head_follows_the_hf_class_not_config_fields(zoo):
    """Aya Vision's text config has logit_scale=0.0625: its VLM class never applies it
    (vLLM's in-tree backend does), while Cohere2's own causal-LM class does."""
    import torch
    from transformers import AutoConfig

    from hf_bridge.head import HFLogitsHead

    aya = AutoConfig.from_pretrained(zoo("aya_vision"))
    assert aya.text_config.logit_scale == 0.0625
    assert HFLogitsHead.from_config(aya).is_identity

    text_only = HFLogitsHead.from_config(aya.text_config)  # -> Cohere2ForCausalLM
    logits = torch.tensor([[-100.0, 0.0, 3.0, 100.0]])
    assert not text_only.is_identity
    assert torch.allclose(text_only(logits), logits * 0.0625)


def test_bidirectional_models_are_marked_for_vllms_mm_prefix_attention():
    """Every detected model gets `is_mm_prefix_lm`, not only those on vLLM's list (Gemma 4
    Unified is not on it); a checkpoint's own setting is kept; others are left alone."""
    from transformers import Gemma4UnifiedConfig, LlavaConfig

    from hf_bridge.bidirectional import mark_bidirectional

    unified = Gemma4UnifiedConfig()
    assert mark_bidirectional(unified) and unified.is_mm_prefix_lm is True
    kept = Gemma4UnifiedConfig()
    kept.is_mm_prefix_lm = False
    assert not mark_bidirectional(kept)
    llava = LlavaConfig()
    assert not mark_bidirectional(llava) and not hasattr(llava, "is_mm_prefix_lm")
