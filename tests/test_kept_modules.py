"""`kept_modules.py` without vLLM: which HF modules stay out of vLLM's layer replacement."""

from __future__ import annotations

import torch
from transformers import Llama4TextConfig, Qwen3MoeConfig
from transformers.models.llama4.modeling_llama4 import Llama4Router, Llama4TextMoe
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

from hf_bridge.kept_modules import (
    computes_silu,
    experts_modules,
    experts_of_another_width,
    experts_with_another_gated_mlp,
    experts_without_routing,
    kept_out,
    layers_checked_by_type,
    linears_read_directly,
    linears_with_own_forward,
    norms_over_another_axis,
    statistics_over_sharded_units,
    torch_composites,
)

TINY = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, vocab_size=100)


def test_only_torch_composites_are_kept_from_layer_replacement():
    """nn.MultiheadAttention is hidden from vLLM's replacement; plain layers are not."""
    root = torch.nn.Module()
    root.proj = torch.nn.Linear(4, 4)
    root.pool = torch.nn.MultiheadAttention(4, 2)
    root.stack = torch.nn.Sequential(torch.nn.Linear(4, 4))
    root.norm = torch.nn.LayerNorm(4)
    assert [name for _, name, _ in torch_composites(root)] == ["pool"]


def test_a_linear_with_a_forward_of_its_own_is_kept_unless_the_plan_shards_it():
    """Llama 4's router is an `nn.Linear` that picks and scores its top-k experts: a vLLM
    linear layer would keep its weight and return bare logits."""
    root = torch.nn.Module()
    root.block = torch.nn.Module()
    root.block.router = Llama4Router(Llama4TextConfig(**TINY, num_local_experts=4))
    root.block.proj = torch.nn.Linear(4, 4)
    assert [(parent, name) for parent, name, _ in linears_with_own_forward(root)] == [(root.block, "router")]
    assert list(linears_with_own_forward(root, sharded=[r"block\.router"])) == []


class _ReadsItsLinears(torch.nn.Module):
    """Reads `proj`'s weight in a helper its forward calls, `block.out`'s bias in its
    forward, and `gate`'s weight only in its init and for its dtype and type."""

    def __init__(self):
        super().__init__()
        self.proj, self.gate, self.kept_whole = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.block = torch.nn.Module()
        self.block.out = torch.nn.Linear(4, 4)
        self.gate.weight.data.zero_()

    def forward(self, x):
        if isinstance(self.gate.weight, torch.Tensor) and x.dtype != self.gate.weight.dtype:
            x = x.to(self.gate.weight.device)
        return self.block.out(self._project(x)) + self.block.out.bias + self.gate(x) + self.kept_whole(x)

    def _project(self, x):
        return x @ self.proj.weight.T

    def _init_weights(self):
        self.kept_whole.weight.data.zero_()


def test_linears_whose_tensors_a_forward_reads_are_kept():
    """vLLM's CPU linear layer leaves an empty `weight` once it has packed it for its kernel:
    a forward that reads the tensors (through a method of its own too) keeps its layer; one
    that reads only their dtype, device or type, or reads them only outside its forward,
    does not."""
    root = torch.nn.Module()
    root.reader = _ReadsItsLinears()
    kept = [(parent, name, module) for parent, name, module in linears_read_directly(root)]
    assert sorted((name, getattr(parent, name) is module) for parent, name, module in kept) == [("out", True), ("proj", True)]
    assert {id(parent) for parent, _, _ in kept} == {id(root.reader), id(root.reader.block)}


def test_jambas_mamba_mixer_keeps_the_projection_it_multiplies_by_directly():
    """Jamba's mixer computes `self.dt_proj.weight @ time_step`; its other linears are called.
    T5's feed-forward reads `wo.weight` only for its type and dtype."""
    from transformers import JambaConfig, T5Config
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer
    from transformers.models.t5.modeling_t5 import T5DenseActDense

    root = torch.nn.ModuleDict({
        "jamba": JambaMambaMixer(JambaConfig(**TINY, mamba_d_state=8, mamba_dt_rank=4), layer_idx=0),
        "t5": T5DenseActDense(T5Config(d_model=32, d_ff=64)),
    })
    assert [(parent, name) for parent, name, _ in linears_read_directly(root)] == [(root["jamba"], "dt_proj")]


def test_experts_that_cannot_take_the_routing_are_kept():
    """vLLM's fused-MoE layer is called as `experts(hidden_states, top_k_index,
    top_k_weights)`; Llama 4's experts take tokens already sorted and weighted per expert."""
    llama4 = Llama4TextMoe(Llama4TextConfig(**TINY, num_local_experts=4, intermediate_size_mlp=64))
    qwen3 = Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(**TINY, num_experts=4, moe_intermediate_size=16))
    root = torch.nn.ModuleDict({"llama4": llama4, "qwen3": qwen3})
    assert [(parent, name) for parent, name, _ in experts_without_routing(root)] == [(llama4, "experts")]


def test_kept_modules_are_out_of_sight_while_layers_are_replaced_then_back_untouched():
    root = torch.nn.Module()
    root.router = Llama4Router(Llama4TextConfig(**TINY, num_local_experts=4))
    router = root.router
    with kept_out(linears_with_own_forward(root)):
        assert not any(isinstance(m, torch.nn.Linear) for m in root.modules())
        assert list(root.parameters()) == []
    assert root.router is router


def test_experts_gated_by_another_function_than_silu_are_kept():
    """vLLM's fused-MoE layer computes `silu(gate) * up` for HF experts: Gemma 4's GELU-gated
    experts, MiniMax-M3's own gate (no `act_fn`) and Step-3.7's clamps around SiLU (its own
    `_apply_gate`) are kept; Qwen3-MoE's SiLU experts are fused."""
    from transformers import Gemma4TextConfig, MiniMaxM3VLTextConfig, Step3p7TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextExperts
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLExperts
    from transformers.models.step3p7.modeling_step3p7 import Step3p7Experts

    root = torch.nn.ModuleDict({name: torch.nn.Module() for name in ("gemma4", "minimax", "step3p7", "qwen3")})
    root["gemma4"].experts = Gemma4TextExperts(Gemma4TextConfig(**TINY, num_experts=4, top_k_experts=2, moe_intermediate_size=16))
    root["minimax"].experts = MiniMaxM3VLExperts(MiniMaxM3VLTextConfig(**TINY, num_local_experts=4))
    step3p7 = Step3p7Experts(Step3p7TextConfig(**TINY, moe_num_experts=4, moe_intermediate_size=16), swiglu_limit=7.0)
    root["step3p7"].experts = step3p7
    root["qwen3"] = Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(**TINY, num_experts=4, moe_intermediate_size=16))
    assert computes_silu(step3p7.act_fn)  # its clamps are in its own `_apply_gate`
    kept = [(parent, name) for parent, name, _ in experts_with_another_gated_mlp(root)]
    assert kept == [(root["gemma4"], "experts"), (root["minimax"], "experts"), (root["step3p7"], "experts")]


def test_silu_is_told_by_what_an_activation_computes():
    from transformers.activations import ACT2FN

    assert computes_silu(ACT2FN["silu"]) and computes_silu(ACT2FN["swish"]) and computes_silu(torch.nn.functional.silu)
    assert not computes_silu(ACT2FN["gelu_pytorch_tanh"]) and not computes_silu(ACT2FN["relu2"]) and not computes_silu(None)


def test_experts_kept_as_a_list_of_mlps_are_judged_by_their_first():
    """Experts kept as a `ModuleList` of MLPs (vLLM fuses those too): SiLU-gated Llama MLPs
    are fused, GELU-gated Gemma MLPs kept."""
    from transformers import GemmaConfig, LlamaConfig
    from transformers.models.gemma.modeling_gemma import GemmaMLP
    from transformers.models.llama.modeling_llama import LlamaMLP

    root = torch.nn.ModuleDict({name: torch.nn.Module() for name in ("llama", "gemma")})
    root["llama"].experts = torch.nn.ModuleList(LlamaMLP(LlamaConfig(**TINY)) for _ in range(2))
    root["gemma"].experts = torch.nn.ModuleList(GemmaMLP(GemmaConfig(**TINY)) for _ in range(2))
    assert [(parent, name) for parent, name, _ in experts_with_another_gated_mlp(root)] == [(root["gemma"], "experts")]



def test_experts_of_another_width_than_most_are_named():
    """Ernie 4.5 VL's every MoE layer holds text experts 1536 wide and vision experts 512
    wide (`moe_intermediate_size=[1536, 512]`, per modality): vLLM's fused-MoE layer takes
    one width, which it read from that list by layer index (512 for layer 1, an IndexError
    past layer 1). The vision experts are the ones of another width; experts of one width
    (Qwen3-MoE's) name nothing."""
    from transformers import Ernie4_5_VLMoeTextConfig
    from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import Ernie4_5_VLMoeMoeBlock

    config = Ernie4_5_VLMoeTextConfig(**TINY, moe_intermediate_size=[96, 48], moe_num_experts=4, moe_k=2)
    root = torch.nn.Module()
    root.layers = torch.nn.ModuleList([Ernie4_5_VLMoeMoeBlock(config) for _ in range(3)])
    width, other = experts_of_another_width(experts_modules(root))
    assert width == 96
    assert [parent for parent, _, _ in other] == [layer.vision_moe for layer in root.layers]
    qwen = torch.nn.Module()
    qwen.block = Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(**TINY, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48))
    assert experts_of_another_width(experts_modules(qwen)) == (48, [])
    assert experts_of_another_width([]) == (None, [])


def test_norms_over_another_axis_than_the_last_are_kept():
    """timm's `RmsNorm2d` (Gemma 3n's MobileNetV5 tower) normalizes an NCHW map over its
    channels, with the RMS pattern vLLM's fuser matches without reading the axis; vLLM's
    RMSNorm would normalize the last axis (the tower raised). Norms over the last axis
    (the decoder's) are left to vLLM."""
    from timm.layers import RmsNorm2d
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    root = torch.nn.Module()
    root.tower = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), RmsNorm2d(8), torch.nn.Conv2d(8, 8, 1), RmsNorm2d(8))
    root.norm = LlamaRMSNorm(8)
    root.proj = torch.nn.Linear(8, 8)
    kept = [(parent, name) for parent, name, _ in norms_over_another_axis(root)]
    assert kept == [(root.tower, "1"), (root.tower, "3")]


def test_layers_a_forward_tells_apart_by_type_are_kept():
    """Parakeet's subsampling masks padded frames after each `nn.Conv2d` among its layers
    (`isinstance(layer, nn.Conv2d)`): vLLM's `Conv2dLayer` would pass unmasked. Its
    encoder blocks' 1-D convolutions, linears and norms are not checked by type, and
    `_init_weights` (which tells every layer apart) does not count."""
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet.modeling_parakeet import ParakeetEncoder

    config = ParakeetEncoderConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   subsampling_conv_channels=8)
    encoder = ParakeetEncoder(config)
    kept = [(parent, name) for parent, name, _ in layers_checked_by_type(encoder)]
    convs = [(encoder.subsampling.layers, name) for name, layer in encoder.subsampling.layers.named_children()
             if isinstance(layer, torch.nn.Conv2d)]
    assert kept == convs and len(convs) == 5
    llama = Llama4TextMoe(Llama4TextConfig(**TINY, num_local_experts=2))
    assert list(layers_checked_by_type(llama)) == []


def test_modules_taking_statistics_over_units_the_plan_shards_are_kept_whole():
    """Gemma 3n's MLP cuts its gate's activations at their mean plus a multiple of their
    standard deviation, over the units the plan shards column-wise: at TP=2 each rank took
    them over its half (prompt log-probs 0.1 from transformers, greedy tokens off on text
    alone). Such an MLP is kept whole, judged by its class's code (its second layer's,
    without sparsity, too); Llama's, which takes none, is sharded as planned, and so is
    Gemma 3n's attention."""
    from transformers import Gemma3nTextConfig, LlamaConfig
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextModel
    from transformers.models.llama.modeling_llama import LlamaModel

    small = dict(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                 vocab_size=64, num_hidden_layers=2)
    gemma3n = Gemma3nTextModel(Gemma3nTextConfig(**small, vocab_size_per_layer_input=64, hidden_size_per_layer_input=8,
                                                 laurel_rank=4, activation_sparsity_pattern=[0.95, 0.0],
                                                 layer_types=["full_attention", "full_attention"], num_kv_shared_layers=0))
    kept = list(statistics_over_sharded_units(gemma3n, gemma3n.config.base_model_tp_plan))
    assert [(name, type(module).__name__) for _, name, module in kept] == [("mlp", "Gemma3nTextMLP")] * 2
    assert [parent for parent, _, _ in kept] == list(gemma3n.layers)
    llama = LlamaModel(LlamaConfig(**small))
    assert list(statistics_over_sharded_units(llama, llama.config.base_model_tp_plan)) == []
    assert list(statistics_over_sharded_units(gemma3n, {})) == []  # nothing sharded, nothing taken over a shard


def test_a_flat_models_towers_are_told_from_its_decoder_by_its_plan(generic):
    """Phi-4-multimodal's decoder layers sit beside its towers in one base model, with no
    text model to keep in: its text parts are the children its tensor-parallel plan shards
    and its input embeddings, and everything else holding weights is kept whole."""
    from transformers import AutoConfig, AutoModel

    from hf_bridge.kept_modules import children_beside, planned_children

    model = AutoModel.from_config(AutoConfig.from_pretrained(generic("phi4_multimodal")))
    text_parts = planned_children(model, model.tp_plan.keys())
    assert text_parts == [model.layers]
    kept = children_beside(model, [*text_parts, model.get_input_embeddings()])
    assert [name for _, name, _ in kept] == ["norm", "embed_tokens_extend"]

