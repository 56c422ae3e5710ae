"""Checkpoints that ship their own code (`trust_remote_code=True`), as users' models
transformers does not have do: a new model type whose config, base model, generation
class and processor are classes beside the weights (`hf_bridge.zoo.remote_code`). The
generation class builds its own base model and scales the logits, which no config field
says: hf_bridge must take both from the checkpoint's code, not from transformers'
classes for a similar model type."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hf_bridge.hf_classes import base_model_class, remote_code_class
from hf_bridge.validate import parity
from hf_bridge.validate.checkpoint import load_config, load_processor, refuse_untrusted_code, remote_code_trusted
from hf_bridge.validate.reference import cache_references, references
from hf_bridge.zoo.remote_code import LOGIT_SCALE, PREFIX, remote_code_copy
from helpers.conditioning import assert_well_conditioned
from helpers.scripts import load_script

CASES = {"llava": ["one_image", "text_only"], "qwen2_vl": ["one_image", "two_images", "text_only", "video"],
         "gemma3": ["one_image", "two_images", "text_only"]}
"""Qwen2-VL for its video and position ids, Gemma3 for attention both ways within an
image, which hf_bridge reads from the base model class's forward."""


TRANSFORMERS_CONFIG = "llava_transformers_config"
"""The LLaVA copy whose config stays transformers' class: `auto_map` names its model
classes only, so loading the config records no trust; the engine's flag does."""


@pytest.fixture(scope="module")
def own_code(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("own_code")
    copies = {arch: remote_code_copy(zoo(arch), root / arch) for arch in CASES}
    copies[TRANSFORMERS_CONFIG] = remote_code_copy(zoo("llava"), root / TRANSFORMERS_CONFIG, own_config=False)
    return copies


CLASSES_AND_HEAD = """
import json, sys, torch
from hf_bridge.head import HFLogitsHead, generation_class
from hf_bridge.hf_classes import base_model_class, mark_trusted_code
from hf_bridge.validate.checkpoint import load_config, remote_code_trusted
with remote_code_trusted(True):
    config = load_config(sys.argv[1])
found = {"config": type(config).__module__, "unmarked_base": base_model_class(config).__name__}
mark_trusted_code(config)  # as the plugin does for an engine given trust_remote_code=True
head = HFLogitsHead.from_config(config)
logits = torch.randn(3, config.text_config.vocab_size)
print(json.dumps(dict(found, base=base_model_class(config).__name__, generation=generation_class(config).__name__,
                      identity=head.is_identity, scale=(head(logits) / logits).unique().tolist())))
"""


@pytest.mark.parametrize(("copy", "config_module", "unmarked_base"), [
    ("llava", "transformers_modules", f"{PREFIX}LlavaModel"),
    (TRANSFORMERS_CONFIG, "transformers.models.llava", "LlavaModel"),
])
def test_the_checkpoints_classes_are_read_from_its_code_once_trusted(own_code, copy, config_module, unmarked_base):
    """A config of the checkpoint's own is trust on record; transformers' config class is
    not, until the engine's `trust_remote_code` marks it. In a fresh interpreter: once
    vLLM's in-tree backend has built an engine in a process (earlier tests do),
    transformers' decoder classes there cannot be built outside an engine ("Current vLLM
    config is not set"; see the README), the head's among them."""
    done = subprocess.run([sys.executable, "-c", CLASSES_AND_HEAD, str(own_code[copy])], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["config"].startswith(config_module) and found["unmarked_base"] == unmarked_base, found
    assert (found["base"], found["generation"]) == (f"{PREFIX}LlavaModel", f"{PREFIX}LlavaForConditionalGeneration"), found
    assert found["identity"] is False and found["scale"] == [LOGIT_SCALE], found


def test_an_auto_map_on_a_transformers_config_is_not_trusted(zoo):
    """transformers builds its own classes for such a config unless the user trusts the
    code; without that trust on record, hf_bridge reads transformers' classes too."""
    config = load_config(zoo("llava"))
    config.auto_map = {"AutoModel": "modeling_own.OwnLlavaModel"}
    assert remote_code_class(config, "AutoModel") is None
    assert base_model_class(config).__name__ == "LlavaModel"


def test_untrusted_code_is_refused_naming_the_flag(own_code, capsys):
    with pytest.raises(SystemExit, match=r"hf-bridge validate: .* ships its own code, which transformers runs to load "
                                         r"its config \(`auto_map`\); read it, then pass --trust-remote-code to run it"):
        refuse_untrusted_code(own_code["llava"], "hf-bridge validate")
    # transformers' config loads without trust, and says which classes the run checks instead
    with pytest.raises(SystemExit, match=r"ships its own code, which transformers runs to load its processor"):
        refuse_untrusted_code(own_code[TRANSFORMERS_CONFIG], "hf-bridge validate")
    assert ("ships its own model code (`auto_map`: AutoModel, AutoModelForImageTextToText), which transformers and vLLM "
            "build only once it is trusted; this run checks transformers' classes for LlavaConfig instead") in capsys.readouterr().err
    with remote_code_trusted(True):
        refuse_untrusted_code(own_code["llava"], "hf-bridge validate")
        assert type(load_processor(own_code["llava"])).__name__ == f"{PREFIX}LlavaProcessor"


def test_inspect_reads_a_trusted_checkpoints_processor(own_code):
    import hf_bridge

    shown = hf_bridge.inspect(own_code["llava"], "USER: <image>\nDescribe. ASSISTANT:", images=[parity.test_image(64, 64, 1)],
                              trust_remote_code=True)
    assert f"{PREFIX}LlavaProcessor" in str(shown) and "image 0: positions" in str(shown), shown


def trusted_reference(model_dir, case, arch_cases: list[str]):
    """transformers' result for `case` on a checkpoint whose code is trusted, checked not
    degenerate and well conditioned, with the checkpoint's own processor. The first call
    computes every case the copy runs (`arch_cases`), in float32 and float64, in one interpreter."""
    standard = parity.standard_cases(64)
    with remote_code_trusted(True):
        cache_references(model_dir, [standard[name] for name in arch_cases], ("float32", "float64"))
        (reference,) = references(model_dir, [case])
        assert not parity.is_degenerate(reference.tokens), reference.tokens
        assert_well_conditioned(model_dir, case, reference)
        return reference, load_processor(model_dir)


@pytest.mark.engine
@pytest.mark.parametrize(("arch", "case"), [(a, c) for a in ("qwen2_vl", "gemma3") for c in CASES[a]])
def test_own_code_keeps_parity(arch, case, own_code, engines):
    model_dir = own_code[arch]
    the_case = parity.standard_cases(64)[case]
    reference, processor = trusted_reference(model_dir, the_case, CASES[arch])
    limits = {"image": 2, "video": 1} if arch == "qwen2_vl" else {"image": 2}
    llm = engines.get(model_dir, trust_remote_code=True, limit_mm_per_prompt=limits)
    assert parity.compare(reference, parity.vllm_result(llm, processor, the_case)) == []


@pytest.mark.engine
@pytest.mark.parametrize("case", CASES["llava"])
def test_own_model_classes_under_a_transformers_config_keep_parity(case, own_code, engines):
    """vLLM builds the checkpoint's base model once the engine trusts its code, whatever
    the config's class; hf_bridge takes the head from the same code (before, it read
    transformers' LLaVA head for this config: log-probs off by up to 3.2)."""
    model_dir = own_code[TRANSFORMERS_CONFIG]
    the_case = parity.standard_cases(64)[case]
    reference, processor = trusted_reference(model_dir, the_case, CASES["llava"])
    llm = engines.get(model_dir, trust_remote_code=True, limit_mm_per_prompt={"image": 2})
    assert type(llm.model_config.hf_config).__module__.startswith("transformers.models.llava")
    assert parity.compare(reference, parity.vllm_result(llm, processor, the_case)) == []


@pytest.mark.engine
def test_validate_runs_own_code_and_the_in_tree_backend_misses_its_head(own_code):
    """`hf-bridge validate --trust-remote-code`: every stage passes through hf_bridge. The
    in-tree backend places and encodes the same, then decodes without the checkpoint's
    head: the same tokens (the scale keeps the argmax), log-probs off."""
    from hf_bridge.validate.command import run
    from hf_bridge.validate.stages import FAIL, NOT_APPLICABLE, PASS

    cases = CASES["llava"]
    expected = {("one_image", stage): PASS for stage in ("processing", "encoder", "decoding")}
    expected |= {("text_only", "processing"): NOT_APPLICABLE, ("text_only", "encoder"): NOT_APPLICABLE, ("text_only", "decoding"): PASS}
    own = run(own_code["llava"], "hf_bridge", case_names=cases, trust_remote_code=True)
    assert {(v.case, v.stage): v.outcome for v in own.verdicts} == expected, own
    assert own.exit_code == 0
    # REMOTE_CODE.md's script, on the same copy (its own cases, two images among them)
    assert load_script("remote_code_sweep").check("llava", own_code["llava"].parent) == (0, [])
    in_tree = run(own_code["llava"], "intree", case_names=cases, trust_remote_code=True)
    missed_head = {key: FAIL if key[1] == "decoding" else outcome for key, outcome in expected.items()}
    assert {(v.case, v.stage): v.outcome for v in in_tree.verdicts} == missed_head, in_tree
    for verdict in (v for v in in_tree.verdicts if v.stage == "decoding"):
        assert verdict.detail.startswith("generated log-probs differ") and "prompt log-probs differ" in verdict.detail, verdict
