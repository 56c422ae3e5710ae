"""MoE VLMs keep vLLM's fused-MoE path: hf_bridge's class composed with `MoEMixin`.

Parity on text, images and video is in `test_parity` (zoo `qwen3_vl_moe`); this checks
that the experts it runs are vLLM's fused-MoE layers, and the tying rule that made a
default-built Qwen3-VL-MoE diverge from the first generated token.
"""

from __future__ import annotations

import pytest


@pytest.mark.engine
def test_experts_run_on_vllm_fused_moe_layer(zoo, engines):
    from transformers import AutoConfig
    from vllm.model_executor.layers.fused_moe import MoERunner, RoutedExperts

    model_dir = zoo("qwen3_vl_moe")
    llm = engines.get(model_dir, limit_mm_per_prompt={"image": 2, "video": 1})
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    assert type(model).__name__ == "HFBridgeMoEForConditionalGeneration"
    text_config = AutoConfig.from_pretrained(model_dir).text_config
    experts = {name: m for name, m in model.named_modules() if name.endswith("mlp.experts")}
    assert len(experts) == text_config.num_hidden_layers, experts
    assert all(isinstance(m, MoERunner) for m in experts.values()), experts
    assert all(isinstance(m.routed_experts, RoutedExperts) for m in experts.values())
    # the router too runs inside vLLM's runner (internal routing), not in the HF block
    assert all(type(m.gate).__name__ == "GateLinear" for m in experts.values())
    assert model.num_moe_layers == text_config.num_hidden_layers
    assert model.num_logical_experts == text_config.num_experts


def test_lm_head_is_tied_exactly_when_transformers_ties_it(zoo):
    """Qwen3-VL-MoE's defaults give `tie_word_embeddings` False at the top and True in the
    text config; transformers reads the top one (the HF class's own config). The HF model
    is built in a clean interpreter: vLLM has decorated HF classes in this one."""
    import subprocess
    import sys

    from transformers import AutoConfig

    from hf_bridge.model import HFBridgeForConditionalGeneration

    model_dir = zoo("qwen3_vl_moe")
    config = AutoConfig.from_pretrained(model_dir)
    assert config.tie_word_embeddings is False and config.text_config.tie_word_embeddings is True
    code = (
        "import sys; from transformers import AutoModelForImageTextToText as M; "
        "m = M.from_pretrained(sys.argv[1]); "
        "print(m.lm_head.weight.data_ptr() == m.get_input_embeddings().weight.data_ptr())"
    )
    done = subprocess.run([sys.executable, "-c", code, str(model_dir)], capture_output=True, text=True, timeout=300)
    hf_ties = done.stdout.strip().splitlines()[-1] == "True"
    holder = type("ConfigOnly", (), {"config": config})()
    assert HFBridgeForConditionalGeneration._get_tie_word_embeddings(holder) is hf_ties is False


def test_vllm_reads_the_experts_own_width_while_it_replaces_them():
    """vLLM's `MoEMixin` reads `moe_intermediate_size` and indexes a list by layer; Ernie 4.5
    VL's list is per modality, in a strict config that refuses an int. While the experts are
    replaced, vLLM reads the width the experts declare; the config is whole again after."""
    from transformers import Ernie4_5_VLMoeTextConfig
    from vllm.config.utils import getattr_iter

    from hf_bridge.moe import VLLM_WIDTH_FIELDS, experts_width_read

    config = Ernie4_5_VLMoeTextConfig(moe_intermediate_size=[96, 48])
    with experts_width_read(config, 96):
        assert getattr_iter(config, list(VLLM_WIDTH_FIELDS), None) == 96
    assert config.moe_intermediate_size == [96, 48]
    with experts_width_read(config, None):
        assert config.moe_intermediate_size == [96, 48]


def test_blocks_vllm_would_route_otherwise_are_named():
    """vLLM replaces a whole MoE block by its own router and fused layer where its fuser
    matches the gate. LFM2-MoE's block holds the `expert_bias` it hands its gate, which that
    router would not read; its gate scores by sigmoid with no expert groups, which vLLM's CPU
    router refuses (`assert self.scoring_func == "softmax"`). Qwen3-MoE's softmax block, and
    DeepSeek-V3's sigmoid block routed in expert groups, route in vLLM as in transformers."""
    import torch
    from transformers import DeepseekV3Config, Lfm2MoeConfig, Qwen3MoeConfig
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
    from transformers.models.lfm2_moe.modeling_lfm2_moe import Lfm2MoeSparseMoeBlock
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    from hf_bridge.moe import _why_routed_otherwise, experts_routed_otherwise

    tiny = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, vocab_size=100)
    lfm2 = Lfm2MoeConfig(**tiny, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    qwen3 = Qwen3MoeConfig(**tiny, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
    deepseek = DeepseekV3Config(**tiny, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, n_group=1,
                                topk_group=1, n_shared_experts=1)
    with torch.device("meta"):
        blocks = torch.nn.ModuleDict({"lfm2": Lfm2MoeSparseMoeBlock(lfm2), "qwen3": Qwen3MoeSparseMoeBlock(qwen3),
                                      "deepseek": DeepseekV3MoE(deepseek)})
    assert _why_routed_otherwise(blocks["lfm2"], lfm2) == "its block holds expert_bias, which vLLM's router would not read"
    lfm2.use_expert_bias = False
    with torch.device("meta"):
        unbiased = Lfm2MoeSparseMoeBlock(lfm2)
    assert _why_routed_otherwise(unbiased, lfm2) == (
        "its gate scores by sigmoid without expert groups; vLLM's CPU router takes softmax only")
    assert _why_routed_otherwise(blocks["qwen3"], qwen3) == "" and _why_routed_otherwise(blocks["deepseek"], deepseek) == ""
    from hf_bridge.kept_modules import experts_modules

    assert [(site[0], why) for site, why in experts_routed_otherwise(list(experts_modules(blocks)), deepseek)] == [
        (blocks["lfm2"], "its block holds expert_bias, which vLLM's router would not read")]
