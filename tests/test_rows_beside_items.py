"""Ovis2, built by the sweep's generic shrinker: a processor that types the `<image>` marker
its own expansion replaces, so its token types mark nothing (hf_bridge types the tokens
the config names, `probes.config_token_types`), and a forward that gives its visual
indicator tokens (`<IMG_START>`, `<IMG_GRID>`, ...) rows of its visual embedding table only
beside an image (`rows_beside_items.py`), never to a generated one. The in-tree backend
cannot count its tokens."""

from __future__ import annotations

import pytest
import torch

from helpers.conditioning import assert_well_conditioned
from hf_bridge import features, probes, processor_probe
from hf_bridge.forward_token_rows import EMBEDS, asked_ids, learn_token_rows
from hf_bridge.rows_beside_items import rows_beside_items
from hf_bridge.validate import parity
from hf_bridge.validate.reference import cache_references, references


@pytest.fixture(scope="module")
def ovis2(generic):
    return generic("ovis2")


def _probe(model_dir):
    from transformers import AutoConfig, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    return processor_probe.ProcessorProbe(processor, processor.tokenizer, config, call=lambda data, kw: processor(**data, **kw, return_tensors="pt"))


def _asked_ids(probe):
    """(an ordinary token's id and every added one's below the vocabulary size, that size),
    as the model asks them at load."""
    vocab_size = probe.config.get_text_config().vocab_size
    return torch.tensor(asked_ids(probe.tokenizer.added_tokens_decoder, vocab_size)), vocab_size


def test_the_token_the_config_names_is_typed_where_the_processor_types_none(ovis2):
    probe = _probe(ovis2)
    case = parity.standard_cases(64)["one_image"]
    out = parity.hf_inputs(probe.processor, case, return_mm_token_type_ids=True)
    assert not out["mm_token_type_ids"].any()  # transformers types `<image>`, which its expansion replaced
    assert not probes.token_type_ids(out, probe.processor).any()
    types = torch.as_tensor(probes.token_type_ids(out, probe.processor, probe.config))[0]
    atoms = out["input_ids"][0] == probe.config.image_token_id
    assert atoms.sum() > 0 and torch.equal(types, atoms.long() * probes.MODALITY_TYPE_IDS["image"])
    assert probe.placeable() == ["image"] and probe.failures == {}


@torch.no_grad()
def test_indicator_rows_are_the_forwards_own_and_learnt_beside_an_image_only(ovis2):
    from transformers import AutoModel

    probe = _probe(ovis2)
    model = AutoModel.from_pretrained(ovis2, dtype=torch.float32).eval()
    ids, vocab_size = _asked_ids(probe)
    table = model.get_input_embeddings()(ids)
    served = torch.ones(len(ids), dtype=torch.bool)
    alone, every_token = learn_token_rows(ids, features.handed_to_decoder(model, ids[None], {}), {EMBEDS: (table, served)}, vocab_size)
    assert alone == {} and every_token == []  # with ids alone its forward hands the table's rows

    model.train()  # as vLLM leaves it where hf_bridge asks (`process_weights_after_loading`)
    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}
    rows, skipped = rows_beside_items(model, probe, ids, table, vocab_size)
    assert all(module.training for module in model.modules())
    assert all(torch.equal(buffer, buffers[name]) for name, buffer in model.named_buffers())
    model.eval()
    indicators = probe.config.visual_indicator_token_ids
    assert skipped == {} and rows.ids().tolist() == sorted(indicators)
    pixel_values = parity.hf_inputs(probe.processor, parity.standard_cases(64)["one_image"])["pixel_values"]
    own = model.get_image_features(pixel_values=pixel_values, return_dict=True).visual_indicator_features
    placed = rows.apply(torch.tensor(indicators), model.get_input_embeddings()(torch.tensor(indicators)))
    assert torch.equal(placed, own)


@torch.no_grad()
def test_a_forward_that_builds_no_rows_beside_an_item_is_asked_once(zoo, monkeypatch):
    """LLaVA's forward hands its added tokens the table's rows beside an image too: beside
    the first blank, no row differs, and the second blank is not forwarded."""
    from transformers import AutoModel

    from hf_bridge import rows_beside_items as module

    model_dir = zoo("llava")
    probe = _probe(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids, vocab_size = _asked_ids(probe)
    asked = []
    handed_after = module._handed_after
    monkeypatch.setattr(module, "_handed_after", lambda *args: asked.append(args[2]) or handed_after(*args))
    rows, skipped = rows_beside_items(model, probe, ids, model.get_input_embeddings()(ids), vocab_size)
    assert rows is None and skipped == {}
    assert len(asked) == len(probes.processor_modalities(probe.processor)) == 1 and len(asked[0]) >= 2


@pytest.mark.engine
@pytest.mark.parametrize("case_name", ["one_image", "two_images"])
def test_ovis2_keeps_parity(ovis2, engines, case_name):
    """One image's continuation writes `<IMG_END>` second: transformers embeds that
    generated marker through its text table, and so must hf_bridge (`apply_beside_media`)."""
    from transformers import AutoConfig, AutoProcessor

    cases = parity.standard_cases(64)
    cache_references(ovis2, [cases["one_image"], cases["two_images"]], ("float32", "float64"))
    (reference,) = references(ovis2, [cases[case_name]])
    assert not parity.is_degenerate(reference.tokens), reference.tokens
    assert_well_conditioned(ovis2, cases[case_name], reference)
    if case_name == "one_image":
        assert reference.tokens[1] in AutoConfig.from_pretrained(ovis2).visual_indicator_token_ids
    processor = AutoProcessor.from_pretrained(ovis2)
    llm = engines.get(ovis2, limit_mm_per_prompt={"image": 2})
    assert parity.compare(reference, parity.vllm_result(llm, processor, cases[case_name])) == []
