"""transformers' classes stay untouched by vLLM's compile decorator (`compile_twin.py`)."""

from __future__ import annotations

import pytest

from hf_bridge.compile_twin import built_as, twin


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
def test_a_notebook_holds_an_engine_and_the_transformers_model_it_is_checked_against(zoo, engines):
    """Before the twin, vLLM's decorator changed transformers' LlamaModel in place: the
    model built before the engine then failed ("'LlamaModel' object has no attribute
    'do_not_compile'"), one built after failed to build ("Current vLLM config is not
    set"). Now both run in the engine's process, and give what transformers gives in a
    clean process; the engine's decoder is still vLLM's compile-marked module."""
    from transformers import AutoProcessor
    from transformers.models.llama.modeling_llama import LlamaModel

    from hf_bridge.validate import parity
    from hf_bridge.validate.reference import references

    model_dir = zoo("llava")
    case = parity.standard_cases(64)["one_image"]
    built_before = parity.load_generation_model(model_dir)
    llm = engines.get(model_dir, max_num_seqs=3)  # its own engine, started after the model above

    def decoder_classes(model):
        decoder = model.get_language_model().model
        return isinstance(decoder, LlamaModel), [cls.__name__ for cls in type(decoder).__mro__]

    (clean,) = references(model_dir, [case])  # transformers in a process vLLM never entered
    for model in (built_before, parity.load_generation_model(model_dir)):
        in_process = parity.hf_reference(model_dir, case, model=model)
        assert parity.compare(clean, in_process) == []
    assert parity.compare(in_process, parity.vllm_result(llm, AutoProcessor.from_pretrained(model_dir), case)) == []

    is_llama, mro = llm.apply_model(decoder_classes)[0]
    assert is_llama and "TorchCompileWithNoGuardsWrapper" in mro
    assert "TorchCompileWithNoGuardsWrapper" not in [cls.__name__ for cls in LlamaModel.__mro__]
