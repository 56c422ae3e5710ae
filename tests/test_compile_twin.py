"""transformers' classes stay untouched by vLLM's compile decorator (`compile_twin.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_bridge.compile_twin import built_as, twin

HELPERS = Path(__file__).parent / "helpers"


def mutate_in_place(cls):
    """What vLLM's `support_torch_compile` does to the class it is given: a new base, an
    `__init__` that needs outside state, a `__call__` reading what that `__init__` set."""

    class Wrapper:
        pass

    old_init = cls.__init__
    cls.__bases__ = cls.__bases__ + (Wrapper,)

    def __init__(self, *args, **kwargs):
        old_init(self, *args, **kwargs)
        self.decorated = True

    cls.__init__ = __init__
    cls.__call__ = lambda self: self.decorated
    return Wrapper


class Decoder:
    def __init__(self, width, *, depth=1):
        self.width, self.depth = width, depth


class WiderDecoder(Decoder):
    def __init__(self, width):
        super().__init__(2 * width)


class Inherited(Decoder):
    """No `__init__` of its own."""


def test_twin_passes_for_its_class():
    decoder_twin = twin(Decoder)
    assert issubclass(decoder_twin, Decoder)
    for attribute in ("__name__", "__qualname__", "__module__", "__doc__"):
        assert getattr(decoder_twin, attribute) == getattr(Decoder, attribute)


def test_decorating_the_twin_leaves_the_class_alone():
    decoder_twin = twin(Decoder)
    wrapper = mutate_in_place(decoder_twin)
    assert wrapper not in Decoder.__mro__ and "__call__" not in Decoder.__dict__
    plain = Decoder(3)
    assert (plain.width, plain.depth) == (3, 1) and not hasattr(plain, "decorated")


def test_instances_built_inside_become_the_decorated_twin():
    decoder_twin = twin(Decoder)
    mutate_in_place(decoder_twin)
    with built_as({Decoder: decoder_twin}):
        built = Decoder(3, depth=2)
        wider = WiderDecoder(3)
    assert type(built) is decoder_twin and isinstance(built, Decoder)
    assert (built.width, built.depth, built()) == (3, 2, True)
    # a subclass of the original is not what was decorated: built as before
    assert type(wider) is WiderDecoder and wider.width == 6 and not hasattr(wider, "decorated")


@pytest.mark.parametrize("original", [Decoder, Inherited], ids=["own __init__", "inherited __init__"])
def test_the_class_is_restored_after_the_context_even_when_it_raises(original):
    init_before = original.__dict__.get("__init__")
    decoder_twin = twin(original)
    mutate_in_place(decoder_twin)
    with pytest.raises(RuntimeError, match="engine failed"), built_as({original: decoder_twin}):
        assert type(original(1)) is decoder_twin
        raise RuntimeError("engine failed")
    assert original.__dict__.get("__init__") is init_before
    after = original(4, depth=3)  # constructor arguments still reach the inherited __init__
    assert type(after) is original and (after.width, after.depth) == (4, 3)


def test_an_undecorated_twin_is_built_without_recursion():
    decoder_twin = twin(Decoder)
    with built_as({Decoder: decoder_twin}):
        built = Decoder(5)
    assert type(built) is decoder_twin and built.width == 5


@pytest.mark.engine
def test_a_notebook_holds_an_engine_and_the_transformers_model_it_is_checked_against(zoo):
    """Before the twin, vLLM's decorator changed transformers' LlamaModel in place: the
    model built before the engine then failed ("'LlamaModel' object has no attribute
    'do_not_compile'"), one built after failed to build ("Current vLLM config is not
    set"). Now both run in the engine's process, and give what transformers gives in a
    clean process; the engine's decoder is still vLLM's compile-marked module. In a fresh
    process, as a notebook's kernel: the tests' own process may hold classes the in-tree
    backend changed."""
    done = subprocess.run(
        [sys.executable, str(HELPERS / "transformers_beside_engine.py"), str(zoo("llava"))],
        capture_output=True, text=True, timeout=600,
    )
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    found = json.loads(line[len("RESULT "):])
    assert "error" not in found, found["error"]
    assert found["engine"] == found["built before"] == found["built after"] == [], found
    assert found["engine decoder is LlamaModel"] and "TorchCompileWithNoGuardsWrapper" in found["engine decoder mro"]
    assert "TorchCompileWithNoGuardsWrapper" not in found["LlamaModel mro"]


@pytest.mark.engine
@pytest.mark.parametrize("enforce_eager", [True, False], ids=["eager", "compiled"])
def test_after_the_in_tree_backend_changed_the_class_in_this_process(zoo, engines, enforce_eager, in_tree_backend_undone):
    """Once vLLM's in-tree backend has decorated LlamaModel itself, a twin would wrap its
    wrapper (vLLM's decorator then failed: "isinstance() arg 2 must be a type"); hf_bridge
    then takes the class as the in-tree backend left it, and stays at parity."""
    from transformers import AutoProcessor

    from hf_bridge.plugin import IN_TREE_FALLBACK
    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import references

    model_dir = zoo("llava")
    case = parity.standard_cases(64)["one_image"]
    processor = AutoProcessor.from_pretrained(model_dir)
    (clean,) = references(model_dir, [case])
    in_tree_name = IN_TREE_FALLBACK.format("TransformersMultiModalForCausalLM")
    for overrides in ({"model_impl": "auto", "hf_overrides": {"architectures": [in_tree_name]}}, {}):
        llm = engines.get(model_dir, enforce_eager=enforce_eager, **overrides)
        assert parity.compare(clean, parity.vllm_result(llm, processor, case)) == []
    assert llm.apply_model(lambda model: type(model).__module__) == ["hf_bridge.model"]


def test_a_plain_hf_model_builds_after_the_in_tree_backend_ran_in_this_process():
    """The test above ran vLLM's in-tree backend here, which decorated LlamaModel in place;
    its fixture put the class back, so a later test in this worker that builds a plain HF
    model is not failed by the one before it ("Current vLLM config is not set")."""
    from transformers import LlamaConfig, LlamaModel
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    assert TorchCompileWithNoGuardsWrapper not in LlamaModel.__mro__
    model = LlamaModel(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, vocab_size=64))
    assert model(input_ids=torch.tensor([[1, 2, 3]])).last_hidden_state.shape == (1, 3, 32)
