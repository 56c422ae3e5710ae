"""Where a checkpoint the user named lives (a local directory, or a hub id fetched, or
found in the hub cache offline, with huggingface_hub, as transformers would), and its
config and processor loaded, running the checkpoint's own code where the user trusts it."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def checkpoint_dir(model: str | Path, command: str) -> Path:
    """`model` as a local directory; `command` names the caller in the error."""
    local = Path(model).expanduser()
    if local.is_dir():
        return local
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(model)))
    except Exception as error:  # noqa: BLE001 - any failure reads as one refusal with its cause
        raise SystemExit(
            f"{command}: {model} is neither a checkpoint directory nor a hub id that could be fetched "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
            "download it where the hub is reachable and pass the directory"
        ) from None


TRUST_REMOTE_CODE_ENV = "HF_BRIDGE_TRUST_REMOTE_CODE"
"""Set inside `remote_code_trusted`, so that the subprocesses a command starts (the
transformers reference, encoder rows, each vLLM worker), which load the checkpoint
again, trust its code too."""

MODEL_AUTO_CLASS_PREFIX = "AutoModel"
"""transformers' auto classes that build a model (`AutoModel`, `AutoModelForImageTextToText`, ...)."""


@contextmanager
def remote_code_trusted(trusted: bool) -> Iterator[None]:
    """Within it, when `trusted`, a checkpoint's own code runs (transformers'
    `trust_remote_code=True`), here and in the processes started meanwhile."""
    before = os.environ.get(TRUST_REMOTE_CODE_ENV)
    if trusted:
        os.environ[TRUST_REMOTE_CODE_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TRUST_REMOTE_CODE_ENV, None)
        else:
            os.environ[TRUST_REMOTE_CODE_ENV] = before


def trusts_remote_code() -> bool:
    return os.environ.get(TRUST_REMOTE_CODE_ENV) == "1"


def load_config(model_dir: str | Path):
    """The checkpoint's config as transformers loads it, also in a process where vLLM has
    since registered a class of its own under its model type (Qwen3-ASR's, which nests the
    audio token a level down), as it does once it loads such a checkpoint."""
    from transformers import AutoConfig

    from ..hf_classes import transformers_own_config_at

    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=trusts_remote_code())
    return transformers_own_config_at(config, model_dir) or config


def feature_ids(model_dir: str | Path) -> dict[str, int]:
    """The token the HF model fills with each modality's encoder rows (`feature_token_ids`),
    named by the config of the model that generates the text: a whole model's thinker's
    (Qwen2.5-Omni's tokens are in its `thinker_config` alone)."""
    from ..features import feature_token_ids
    from ..hf_classes import generating_config

    return feature_token_ids(generating_config(load_config(model_dir)))


def load_processor(model_dir: str | Path, **init_kwargs):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model_dir, trust_remote_code=trusts_remote_code(), **init_kwargs)


def processor_as_vllm_loads(processor, request_kwargs: dict):
    """`processor` as vLLM loads it for a request's `mm_processor_kwargs`: the keys its
    call does not declare load it too (vLLM's `cached_get_processor_without_dynamic_kwargs`).
    A setting only its loading reads then takes effect in the reference as in the engine:
    PerceptionLM's per-call `max_num_tiles` gates tiling, and the tile table it picks from
    is sized by the loaded one."""
    loaded_with = init_only_kwargs(processor, request_kwargs)
    if not loaded_with:
        return processor
    return _processor_loaded_with(processor.tokenizer.name_or_path, json.dumps(loaded_with, sort_keys=True))


def init_only_kwargs(processor, request_kwargs: dict) -> dict:
    """The keys of `request_kwargs` that vLLM loads `processor` with: those its call's
    kwargs (per modality) do not declare."""
    if not request_kwargs:
        return {}
    from vllm.transformers_utils.processor import get_processor_kwargs_keys, get_processor_kwargs_type

    declared = get_processor_kwargs_keys(get_processor_kwargs_type(processor))
    return {key: value for key, value in request_kwargs.items() if key not in declared}


@functools.lru_cache(maxsize=4)
def _processor_loaded_with(model_dir: str, init_kwargs_json: str):
    return load_processor(model_dir, **json.loads(init_kwargs_json))


def refuse_untrusted_code(model_dir: str | Path, command: str) -> None:
    """Refuse, naming the flag, a checkpoint whose config or processor transformers will
    load only by running the code beside it, where the user has not trusted that code.
    A transformers config whose `auto_map` names model classes loads without it, and
    then transformers and vLLM both build transformers' classes: say so, and go on."""
    if trusts_remote_code():
        return
    fix = "read it, then pass --trust-remote-code to run it"
    for load in (load_config, load_processor):
        what = "config" if load is load_config else "processor"
        try:
            loaded = load(model_dir)
        except ValueError as error:
            if "trust_remote_code" not in str(error):
                raise
            raise SystemExit(f"{command}: {model_dir} ships its own code, which transformers runs to load its {what} (`auto_map`); {fix}") from None
        own_models = sorted(name for name in (getattr(loaded, "auto_map", None) or {}) if name.startswith(MODEL_AUTO_CLASS_PREFIX))
        if load is load_config and own_models:
            print(f"{command}: note: {model_dir} ships its own model code (`auto_map`: {', '.join(own_models)}), which "
                  f"transformers and vLLM build only once it is trusted; this run checks transformers' classes for "
                  f"{type(loaded).__name__} instead ({fix})", file=sys.stderr)
