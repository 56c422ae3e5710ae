"""The vLLM plugin: registration, the off switch, version checks, the start-up line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

HELPERS = Path(__file__).parent / "helpers"


def resolved_classes(*checkpoints, **env) -> dict:
    done = subprocess.run(
        [sys.executable, str(HELPERS / "registry_probe.py"), *map(str, checkpoints)],
        capture_output=True, text=True, env=dict(os.environ, **env), timeout=300,
    )
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_entry_point_is_installed():
    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("hf_bridge") == "hf_bridge.plugin:register"


def test_transformers_backend_names_resolve_to_hf_bridge():
    classes = resolved_classes(HF_BRIDGE_DISABLE="0")
    for name in ("TransformersMultiModalForCausalLM", "HFBridgeForConditionalGeneration"):
        assert classes[name] == "hf_bridge.model.HFBridgeForConditionalGeneration", classes
    # MoE VLMs keep vLLM's fused-MoE layers: hf_bridge's class composed with MoEMixin
    assert classes["TransformersMultiModalMoEForCausalLM"] == "hf_bridge.model.HFBridgeMoEForConditionalGeneration"
    # vLLM's own classes stay reachable for checkpoints hf_bridge cannot place
    assert classes["HFBridgeInTreeTransformersMultiModalForCausalLM"] == (
        "vllm.model_executor.models.transformers.TransformersMultiModalForCausalLM"
    )


def test_disable_switch_restores_vllm_in_tree_backend():
    classes = resolved_classes(HF_BRIDGE_DISABLE="1")
    assert classes["TransformersMultiModalForCausalLM"] == (
        "vllm.model_executor.models.transformers.TransformersMultiModalForCausalLM"
    )
    assert classes["HFBridgeForConditionalGeneration"] is None


def test_flat_config_with_media_processor_is_served_as_multimodal(zoo, tmp_path):
    """Chameleon's config is flat, so vLLM resolves it to its text-only class; hf_bridge
    takes it because its processor takes images. A text-only checkpoint stays with vLLM."""
    from transformers import LlamaConfig

    text_only = tmp_path / "text-only"
    LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                vocab_size=512, architectures=["LlamaForCausalLM"]).save_pretrained(text_only)
    chameleon = zoo("chameleon")
    routed = resolved_classes(chameleon, text_only, HF_BRIDGE_DISABLE="0")["checkpoints"]
    assert routed == {str(chameleon): "HFBridgeForConditionalGeneration", str(text_only): "TransformersForCausalLM"}
    in_tree = resolved_classes(chameleon, HF_BRIDGE_DISABLE="1")["checkpoints"]
    assert in_tree == {str(chameleon): "TransformersForCausalLM"}


def test_checkpoint_hf_bridge_cannot_place_goes_to_the_in_tree_backend(zoo, generic):
    """Voxtral's processor takes no audio through `__call__` (only through
    `apply_chat_template`): hf_bridge cannot place any of its items, so vLLM's in-tree
    class serves it, exactly as without hf_bridge, and the reason is logged. Idefics2's
    processor rewrites the text around its images, from the text alone: hf_bridge lets it
    write the prompt (`text_step.py`) and serves it. A MoE VLM resolves to hf_bridge's
    MoE class."""
    voxtral, idefics2, llava, moe = generic("voxtral"), zoo("idefics2"), zoo("llava"), zoo("qwen3_vl_moe")
    done = subprocess.run(
        [sys.executable, str(HELPERS / "registry_probe.py"), str(voxtral), str(idefics2), str(llava), str(moe)],
        capture_output=True, text=True, env=dict(os.environ, HF_BRIDGE_DISABLE="0"), timeout=300,
    )
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    routed = json.loads(line[len("RESULT "):])["checkpoints"]
    assert routed == {
        str(voxtral): "HFBridgeInTreeTransformersMultiModalForCausalLM",
        str(idefics2): "HFBridgeForConditionalGeneration",
        str(llava): "HFBridgeForConditionalGeneration",
        str(moe): "HFBridgeMoEForConditionalGeneration",
    }
    assert ("hf_bridge cannot place this checkpoint's multimodal items (audio: ProbeError: VoxtralProcessor refused every "
            "blank audio hf_bridge probes it with (1x1); for the first: ValueError: ") in done.stderr + done.stdout
    assert "served by vLLM's in-tree Transformers backend (HFBridgeInTreeTransformersMultiModalForCausalLM)" in done.stderr + done.stdout


def test_an_architecture_transformers_no_longer_has_resolves_as_the_class_it_loads(generic, tmp_path):
    """Qwen2.5-Omni's checkpoints name `Qwen2_5OmniModel`, which transformers 5 does not
    have (it loads them as `Qwen2_5OmniForConditionalGeneration`): vLLM could not find the
    class. It resolves as the class transformers loads; where vLLM would read the name as
    an embedding model's, the user is told how to generate."""
    import shutil

    hub = tmp_path / "qwen2_5_omni-hub"
    shutil.copytree(generic("qwen2_5_omni"), hub)
    config = json.loads((hub / "config.json").read_text())
    (hub / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2_5OmniModel"]}))
    auto = resolved_classes(hub, HF_BRIDGE_DISABLE="0")["checkpoints"][str(hub)]
    assert auto.startswith("error: ") and (
        "names its architecture 'Qwen2_5OmniModel', a class transformers does not have; transformers loads it as "
        "Qwen2_5OmniForConditionalGeneration, a generation model") in auto and "runner='generate'" in auto
    generating = resolved_classes(hub, HF_BRIDGE_DISABLE="0", PROBE_RUNNER="generate")["checkpoints"]
    assert generating == {str(hub): "HFBridgeForConditionalGeneration"}


def test_vllm_attention_function_is_vllm_own():
    """hf_bridge reuses the "vllm" attention implementation; it never replaces it. Importing
    hf_bridge registers nothing (checked in a fresh interpreter: an engine built earlier in
    this one has wrapped it); hf_bridge's model wraps it with its check that no attention
    term is dropped (`attention_terms.py`), which calls vLLM's own function."""
    import inspect

    import vllm.model_executor.models.transformers as in_tree
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    code = ("import vllm.model_executor.models.transformers as in_tree; from hf_bridge import model; "
            "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as f; "
            "assert f['vllm'] is in_tree.vllm_attention_forward and f['vllm_mla'] is in_tree.vllm_mla_attention_forward")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert inspect.unwrap(ALL_ATTENTION_FUNCTIONS["vllm"]) is in_tree.vllm_attention_forward


def test_unsupported_versions_fail_with_a_clear_message(monkeypatch):
    from hf_bridge import versions

    monkeypatch.setattr(versions, "installed_version", lambda package: {"vllm": "0.31.2"}.get(package, "5.19.0"))
    with pytest.raises(versions.UnsupportedVersionError, match=r"supports vllm>=0.32.0,<0.33.0, but vllm 0.31.2 is installed"):
        versions.check_versions()
    monkeypatch.setattr(versions, "installed_version", lambda package: {"transformers": "5.20.1"}.get(package, "0.32.0"))
    with pytest.raises(versions.UnsupportedVersionError, match="HF_BRIDGE_DISABLE=1"):
        versions.check_versions()


def test_installed_versions_are_supported():
    from hf_bridge import versions

    versions.check_versions()


@pytest.mark.engine
def test_own_architecture_name_and_startup_line(zoo, engines, hf_bridge_log):
    """`hf_overrides` selects hf_bridge by name; start-up logs the one line saying so."""
    from transformers import AutoProcessor

    from hf_bridge.validate import parity

    model_dir = zoo("llava")
    processor = AutoProcessor.from_pretrained(model_dir)
    case = parity.standard_cases(64)["one_image"]
    llm = engines.get(
        model_dir,
        model_impl="auto",
        hf_overrides={"architectures": ["HFBridgeForConditionalGeneration"]},
        limit_mm_per_prompt={"image": 2},
    )
    lines = [r.getMessage() for r in hf_bridge_log.records if "handles" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("hf_bridge 0.1.0 handles LlavaForConditionalGeneration (model_type=llava)"), lines
    from hf_bridge.validate.reference import references

    (reference,) = references(model_dir, [case])
    assert parity.compare(reference, parity.vllm_result(llm, processor, case)) == []


@pytest.mark.engine
def test_bidirectional_attention_is_reported_with_the_selected_backend(zoo, engines, hf_bridge_log):
    """Gemma3 is served with `is_mm_prefix_lm`; vLLM's CPU backend is causal only, so its
    layers run on hf_bridge's (`cpu_media_attention.py`), and the start-up line says so."""
    from hf_bridge.bidirectional import report_bidirectional_attention
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    llm = engines.get(zoo("gemma3"), limit_mm_per_prompt={"image": 2})
    assert llm.llm_engine.vllm_config.model_config.is_mm_prefix_lm
    lines = [r.getMessage() for r in hf_bridge_log.records if "attends bidirectionally" in r.getMessage()]
    assert lines == ["hf_bridge: gemma3 attends bidirectionally within each image; CPUMediaAttentionBackend does so too."]
    hf_bridge_log.clear()
    report_bidirectional_attention(llm.llm_engine.vllm_config.model_config, CPUAttentionBackend)
    (causal,) = [r.getMessage() for r in hf_bridge_log.records]
    assert "the selected attention backend (CPUAttentionBackend) is causal only" in causal
    assert "Triton, FlexAttention, FlashAttention 4" in causal


def test_startup_line_reaches_the_console_of_a_plain_llm(zoo):
    """Not just a log record: a user's in-process `LLM(...)` at vLLM's default INFO level
    prints the line (hf_bridge's logger once had no handler, and nobody saw it)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from vllm import LLM; "
        "LLM(model=sys.argv[1], model_impl='transformers', dtype='float32', max_model_len=2048, "
        "enforce_eager=True, limit_mm_per_prompt={'image': 1})"
    )
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("VLLM_LOGGING_LEVEL", None)
    done = subprocess.run([sys.executable, "-c", code, str(zoo("llava"))], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hf_bridge 0.1.0 handles LlavaForConditionalGeneration (model_type=llava)" in done.stdout + done.stderr


def test_the_processor_routing_probes_is_the_one_vllms_processing_loads_first(zoo):
    """Routing asks whether hf_bridge can place the checkpoint's items, with its processor
    (`plugin._probe_placement`). It loads that processor through vLLM's own cache, with
    the arguments vLLM's processing loads it with first (the processor's defaults), so
    routing adds no read of the checkpoint's processor and tokenizer to those vLLM makes
    itself: its own load had added one (a real checkpoint's tokenizer takes a good part of
    a second to read)."""
    from vllm.config import ModelConfig
    from vllm.plugins import load_general_plugins
    from vllm.tokenizers import cached_tokenizer_from_config
    from vllm.transformers_utils.processor import cached_get_processor, cached_processor_from_config

    from hf_bridge import plugin
    from hf_bridge.processing import hf_processor_class

    load_general_plugins()
    config = ModelConfig(model=str(zoo("llava")), model_impl="transformers", dtype="float32", max_model_len=4096)
    assert config.architecture == "HFBridgeForConditionalGeneration"
    plugin._PLACEMENT.clear()
    cached_get_processor.cache_clear()
    assert plugin.unplaceable(config) is None
    routed = cached_get_processor.cache_info()
    assert routed.misses == 1, "routing read the processor around vLLM's cache"
    # what vLLM's processing asks for (`InputProcessingContext.get_hf_processor`)
    cached_processor_from_config(config, hf_processor_class(config.model, config.revision),
                                 tokenizer=cached_tokenizer_from_config(config))
    served = cached_get_processor.cache_info()
    assert served.hits > routed.hits and served.misses == routed.misses + 1  # only the load with its tokenizer


def test_the_scans_namespace_is_vars_own_answer_wherever_that_is_a_mapping():
    """What vLLM's kernel override scan reads in place of `vars(value)`: what `vars`
    returns for an instance, a class (a mappingproxy) and a module, and for an object
    whose `__dict__` is some other mapping; an empty namespace only where
    `__dict__` answers with something that is no mapping (llvmlite's `ffi.lib`)."""
    import collections
    import json as a_module

    from hf_bridge.kernel_rebind_scan import namespace_of

    class Instance:
        def __init__(self):
            self.kernel = "k"

    class OwnMapping:
        __dict__ = collections.OrderedDict(kernel="k")

    class NotAMapping:
        @property
        def __dict__(self):
            return len

    for value in (Instance(), Instance, a_module, OwnMapping()):
        namespace = namespace_of(value)
        assert type(namespace) is type(vars(value)) and namespace == vars(value)
    assert namespace_of(Instance())["kernel"] == "k" and namespace_of(OwnMapping())["kernel"] == "k"
    assert namespace_of(NotAMapping()) == {}


def test_cpu_engine_starts_in_a_process_that_imported_numba(zoo):
    """A notebook that imported numba (librosa does) before `LLM(...)`: vLLM's CPU kernel
    override scan read llvmlite's `ffi.lib` as a module namespace, and the engine failed to
    start with `'_lib_fn_wrapper' object has no attribute 'get'` (`kernel_rebind_scan.py`)."""
    code = (
        "import sys, numba; from vllm import LLM; "
        "llm = LLM(model=sys.argv[1], model_impl='transformers', dtype='float32', max_model_len=2048, "
        "enforce_eager=True, limit_mm_per_prompt={'image': 1}); "
        "from vllm import SamplingParams; "
        "(out,) = llm.generate('hello', SamplingParams(max_tokens=4, min_tokens=4), use_tqdm=False); "
        "print('TOKENS', len(out.outputs[0].token_ids))"
    )
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    done = subprocess.run([sys.executable, "-c", code, str(zoo("llava"))], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TOKENS 4" in done.stdout
