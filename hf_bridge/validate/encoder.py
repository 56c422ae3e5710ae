"""The encoder stage of `hf-bridge validate`: each item's rows as the decoder receives them.

transformers: the rows the HF model's forward hands its decoder (`inputs_embeds`) at the
positions of the config's image/video/audio token, captured by a pre-hook on
`get_decoder()`, in a clean interpreter with the references (`transformers_side.py`).
vLLM: the rows its model's prefill receives (`inputs_embeds`: vLLM feeds multimodal models embeddings) at
the same positions, captured by a forward pre-hook. Both are the encoder's output as
placed, whatever the model's own splitting and merging, so one rule serves hf_bridge,
the in-tree backend and native models.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from . import parity
from .stages import TRANSFORMERS_REFUSED


def hf_rows(model, processor, cases: list[parity.Case], feature_ids: dict[str, int]):
    """(case name -> the rows `model`'s decoder receives at feature-token positions, or
    the reason there are none; case name -> `encoder_row_count`; case name -> the rows of
    its items encoded alone, `rows_of_items_alone`, for cases with several items of a
    modality). Runs in this interpreter, which must be clean: `transformers_side.py`."""
    import torch

    captured: list[torch.Tensor] = []
    receiver, key = prompt_embeds_receiver(model)

    def keep_inputs_embeds(module, args, kwargs):
        embeds = _handed(args, kwargs, key)
        if embeds is not None:  # a copy: CTRL's decoder scales what it is handed in place
            captured.append(embeds.detach().clone())

    handle = receiver.register_forward_pre_hook(keep_inputs_embeds, with_kwargs=True)
    out: dict[str, np.ndarray | str] = {}
    counts: dict[str, int | str] = {}
    alone: dict[str, np.ndarray] = {}
    try:
        for case in cases:
            captured.clear()
            try:
                inputs = parity.model_inputs(model, processor, case)
            except Exception as error:  # noqa: BLE001 - transformers' own refusal: nothing to compare
                out[case.name] = counts[case.name] = f"{TRANSFORMERS_REFUSED}{type(error).__name__}: {error}"
                continue
            counts[case.name] = encoder_row_count(model, inputs, case)
            try:
                with torch.no_grad():
                    parity.prompt_forward(model, inputs)
            except Exception as error:  # noqa: BLE001 - transformers' own refusal: nothing to compare
                out[case.name] = f"{TRANSFORMERS_REFUSED}{type(error).__name__}: {error}"
                continue
            if not captured:
                out[case.name] = "the HF model did not call its decoder with inputs_embeds"
                continue
            ids = inputs["input_ids"][0]
            positions = feature_positions(ids.tolist(), feature_ids)
            out[case.name] = captured[0][0][positions].float().numpy()
            if has_neighbours(case):
                try:
                    alone[case.name] = rows_of_items_alone(model, processor, case).float().numpy()
                except Exception:  # noqa: BLE001 - only a diagnosis: without it, the rows are compared as they are
                    pass
    finally:
        handle.remove()  # the model serves the references next, in the same interpreter
    return out, counts, alone


def prompt_embeds_receiver(model) -> tuple[Any, str]:
    """(module, argument) the HF model's forward hands the prompt's embeddings to: its
    decoder's `inputs_embeds`; in a flat model, its own decoder (Phi-4-multimodal), its
    first layer's `hidden_states`, where hf_bridge takes them (`features.handed_to_decoder`)."""
    from ..features import decoder_layers_name

    base = model.base_model
    if base.get_decoder() is base:
        return getattr(base, decoder_layers_name(base))[0], FIRST_LAYER_INPUT
    return model.get_decoder(), "inputs_embeds"


FIRST_LAYER_INPUT = "hidden_states"
"""A decoder layer's input, which transformers' layers take first, by position or by name."""


def _handed(args: tuple, kwargs: dict[str, Any], key: str):
    if kwargs.get(key) is not None:
        return kwargs[key]
    return args[0] if key == FIRST_LAYER_INPUT and args else None


def has_neighbours(case: parity.Case) -> bool:
    """Whether the case holds several items of one modality, which transformers processes
    and encodes in one call (its processor may pad them to one size)."""
    return any(count > 1 for count in case.media_counts.values())


def rows_of_items_alone(model, processor, case: parity.Case):
    """The rows transformers' `get_<modality>_features` gives the case's items when each is
    processed and encoded alone (`parity.items_alone`), in prompt order: what it gives
    them in a one-item prompt, and what hf_bridge, which processes, caches and encodes
    every item on its own, places."""
    import torch

    from ..features import encode, feature_token_ids

    hidden = model.config.get_text_config().hidden_size
    tokens = feature_token_ids(model.base_model.config)
    rows = []
    for modality, inputs in parity.items_alone(processor, case, return_tensors="pt"):
        inputs = parity.for_model(inputs, model.dtype)
        fields = {k: v for k, v in inputs.items() if k not in TEXT_FIELDS}
        positions = len(feature_positions(inputs["input_ids"][0].tolist(), tokens))  # what a forward that encodes inline fills
        with torch.no_grad():
            rows.append(encode(model.base_model, modality, fields, hidden, num_embeds=positions or None))
    return torch.cat(rows)


@contextlib.contextmanager
def rows_placed_alone(model, processor, case: parity.Case):
    """While open, the model's decoder receives, at the case's prompt's feature positions,
    the rows of its items encoded alone (`rows_of_items_alone`) instead of those its forward
    computed for them together: transformers as it runs each item in a one-item prompt,
    everything else as in the case's own prompt. Raises where the counts differ."""
    from ..features import feature_token_ids

    prompt_ids = parity.hf_inputs(processor, case)["input_ids"][0].tolist()
    positions = feature_positions(prompt_ids, feature_token_ids(model.config))
    rows = rows_of_items_alone(model, processor, case)
    if rows.shape[0] != len(positions):
        raise ValueError(f"the items encoded alone give {rows.shape[0]} rows, the prompt has {len(positions)} feature positions")

    receiver, key = prompt_embeds_receiver(model)

    def place(module, args, kwargs):
        embeds = _handed(args, kwargs, key)
        if embeds is None or embeds.shape[1] != len(prompt_ids):  # a decoding step, not the prompt
            return None
        embeds = embeds.clone()
        embeds[0, positions] = rows.to(embeds.dtype)
        if key in kwargs:
            return args, {**kwargs, key: embeds}
        return (embeds, *args[1:]), kwargs

    handle = receiver.register_forward_pre_hook(place, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


TEXT_FIELDS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids", "labels"})


def encoder_row_count(model, inputs, case: parity.Case) -> int | str:
    """How many rows the HF model's own `get_<modality>_features` returns for the case's
    items (hf_bridge's `features.encode`, which calls exactly that): what the processor's
    placeholders must announce. Asked directly, so a processor that announces more than
    the tower gives is measured, where the model's forward would only raise. Where the
    entry gives another count of rows than the prompt has positions and the forward fills
    them all (Gemma 3n pads its audio to 188 rows; Gemma 4 drops the rows of the frames
    its processor padded clips to one length with), the forward's count stands; not
    where another modality of the case may place rows at the same token (InternVL's video
    frames take its image token), as the prompt's count is then both modalities'.
    Modalities whose entry is one and the same (InternVL encodes video frames with
    `get_image_features`, from the one `pixel_values` its processor gives images and
    frames) are counted once."""
    import torch

    from ..features import encode, encode_inline, encodes_inline, entry_reads_token_ids, feature_token_ids, features_entry_name

    hidden = model.config.get_text_config().hidden_size
    model = model.base_model  # the entries live there (Fuyu's generation class has none)
    inline = [m for m in case.media_counts if encodes_inline(model, model.config, m)]
    if inline:
        return f"{type(model).__name__} encodes {', '.join(inline)} inline, with no entry to ask: its forward checks the count against the prompt"
    by_ids = [m for m in case.media_counts if entry_reads_token_ids(model, m)]
    if by_ids:
        return (f"{type(model).__name__}'s {', '.join(by_ids)} entry reads the prompt's token ids, so only its forward asks it: "
                "that forward checks the count against the prompt")
    fields = {k: v for k, v in inputs.items() if k not in TEXT_FIELDS}
    prompt, tokens = inputs["input_ids"][0].tolist(), feature_token_ids(model.config)

    def own_token(modality: str) -> int | None:
        token = tokens.get(modality)
        shared = any(tokens.get(other, token) == token for other in case.media_counts if other != modality)
        return None if shared else token

    def count(modality: str) -> int:
        rows = encode(model, modality, fields, hidden).shape[0]
        token = own_token(modality)
        positions = prompt.count(token) if token is not None else 0
        if positions and rows != positions:
            try:
                rows = encode_inline(model, modality, fields, positions).shape[0]
            except Exception:  # noqa: BLE001 - the forward checks the count and raises: the entry's stands
                pass
        return rows

    by_entry: dict[str, str] = {}  # modalities one entry encodes from the same fields count once (InternVL's)
    for modality in case.media_counts:
        by_entry.setdefault(features_entry_name(model, modality) or modality, modality)
    try:
        with torch.no_grad():
            return sum(count(m) for m in by_entry.values())
    except Exception as error:  # noqa: BLE001 - reported: the count could not be taken
        return f"get_*_features raised {type(error).__name__}: {error}"


def feature_positions(prompt_ids: list[int], feature_ids: dict[str, int]) -> list[int]:
    """Where the HF model places encoder rows: every configured feature token, whatever the
    case's modality (InternVL's video frames take its image token)."""
    tokens = set(feature_ids.values())
    return [i for i, t in enumerate(prompt_ids) if t in tokens]


ALONE_PREFIX = "alone:"


def save_rows(path: Path, rows: dict, counts: dict, alone: dict) -> None:
    """What `hf_rows` returned, saved to `path` (.npz, reasons under `__reasons__`)."""
    arrays = {k: v for k, v in rows.items() if isinstance(v, np.ndarray)}
    arrays.update({ALONE_PREFIX + k: v for k, v in alone.items()})
    reasons = {k: v for k, v in rows.items() if isinstance(v, str)}
    np.savez(path, __reasons__=np.array(json.dumps(reasons)), __counts__=np.array(json.dumps(counts)), **arrays)


def load_rows(path: Path) -> tuple[dict[str, np.ndarray | str], dict[str, int | str], dict[str, np.ndarray]]:
    """What `save_rows` saved: (rows or reasons, encoder row counts, rows of the items
    encoded alone) per case name."""
    with np.load(path) as saved:
        rows: dict[str, np.ndarray | str] = {k: saved[k] for k in saved.files if not k.startswith(("__", ALONE_PREFIX))}
        rows.update(json.loads(str(saved["__reasons__"])))
        counts = json.loads(str(saved["__counts__"]))
        alone = {k[len(ALONE_PREFIX):]: saved[k] for k in saved.files if k.startswith(ALONE_PREFIX)}
    return rows, counts, alone


class RowCapture:
    """Keeps the `inputs_embeds` of the engine model's first forward after each `take`
    (the prompt's prefill, one request at a time, prefix caching off): vLLM feeds a
    multimodal model embeddings, its encoder's rows already placed. A forward pre-hook,
    installed through `LLM.apply_model`, leaves the model's methods as they are."""

    def __init__(self, llm):
        self.llm = llm
        llm.apply_model(self._install)

    @staticmethod
    def _install(model) -> None:
        model.hf_bridge_prefill = []

        def keep_first(module, args, kwargs):
            embeds = kwargs.get("inputs_embeds")
            if embeds is not None and not module.hf_bridge_prefill:
                module.hf_bridge_prefill.append(embeds.detach().float().cpu().clone())

        model.register_forward_pre_hook(keep_first, with_kwargs=True)

    def take(self, positions) -> np.ndarray | None:
        """The captured prefill's rows at `positions` (None: no forward had embeddings). Under
        tensor parallelism every worker's model receives the same embeddings: the first's are kept."""
        kept = self.llm.apply_model(_taken)[0]
        if not kept:
            return None
        return kept[0].reshape(-1, kept[0].shape[-1])[list(positions)].numpy()


def _taken(model) -> list:
    """What `RowCapture` kept in `model` since the last take (module level: sent to each
    worker process by reference)."""
    kept = list(model.hf_bridge_prefill)
    model.hf_bridge_prefill.clear()
    return kept
