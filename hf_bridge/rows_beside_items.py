"""Rows an HF forward hands its decoder for added tokens only when the prompt holds an item
(no vLLM import).

Asked with token ids alone (`forward_token_rows.py`), Ovis2's forward hands its visual
indicator tokens (`<IMG_START>`, `<IMG_GRID>`, `<IMG_END>`, ...) its text table's rows; beside
an image it hands them rows of its visual embedding table, and its processor writes them
into every image's expansion. So, for each modality the processor takes, the forward is
asked again with the added ids (but that modality's media tokens) after one processed blank
item, once per `ITEM_FILLS`, and the rows every item agrees on are kept
(`forward_token_rows.agreed_rows`). Where beside the first item every row is what the
ids alone get (every checkpoint but Ovis2's so far), the second is not forwarded. A tiling
processor's blank holds no `<IMG_COL>`: every added id is asked, not only those a blank's
expansion holds.
"""

from __future__ import annotations

from typing import Any

import torch

from . import features, probes, processor_probe
from .forward_token_rows import TokenRows, agreed_rows, beyond_rounding

ITEM_FILLS = (0, 255)
"""The value of every pixel (sample) of the blank items asked beside: a row the forward
builds from the item's content differs between them and is not kept."""

INPUT_IDS, ATTENTION_MASK = "input_ids", "attention_mask"


def rows_beside_items(
    hf_model: torch.nn.Module, probe: processor_probe.ProcessorProbe, ids: torch.Tensor, alone: torch.Tensor, vocab_size: int,
) -> tuple[TokenRows | None, dict[str, str]]:
    """Rows for `ids` (1-D, `ids[0]` an ordinary token) that the forward builds beside an
    item of any modality the processor takes otherwise than `alone` (what it builds for
    them with the ids alone: the text table's rows, or its own where it builds some, as
    Gemma 3n's does);
    and, per modality the forward could not be asked for, why not."""
    learnt: TokenRows | None = None
    skipped: dict[str, str] = {}
    for modality in probes.processor_modalities(probe.processor):
        try:
            rows = _rows_beside(hf_model, probe, modality, ids, alone, vocab_size)
        except Exception as error:  # noqa: BLE001 - a forward that cannot take the ids beside an item
            skipped[modality] = f"{type(error).__name__}: {error}"
            continue
        if rows is not None:
            learnt = rows if learnt is None else learnt.joined(rows)
    return learnt, skipped


def _rows_beside(
    hf_model: torch.nn.Module, probe: processor_probe.ProcessorProbe, modality: str, ids: torch.Tensor, alone: torch.Tensor,
    vocab_size: int,
) -> TokenRows | None:
    """`rows_beside_items` for one modality. Its media tokens are left out of the ids asked:
    the forward counts them against the item's features."""
    outputs = _processed_blanks(probe, modality)
    if outputs is None:
        return None  # it takes no blank item: the engine's probes report why
    media = set(probes.config_token_ids(probe.config).values())
    for out in outputs:
        types = probes.token_type_ids(out, probe.processor, probe.config)[0].tolist()
        media |= {i for i, t in zip(out["input_ids"][0].tolist(), types) if t}
    asked = torch.tensor([i for i in ids.tolist() if i not in media], dtype=torch.long)
    if len(asked) < 2:
        return None  # every added token is a media token
    alone = alone[torch.isin(ids, asked.to(ids.device))]
    runs = []
    for out in outputs:
        run = _handed_after(hf_model, out, asked)
        if run is None:
            return None
        if not runs and not beyond_rounding(run, alone).any():
            return None  # beside the first item every row is what the ids alone get: none to learn
        runs.append(run)
    return agreed_rows(asked.to(ids.device), runs, alone, vocab_size)


def _processed_blanks(probe: processor_probe.ProcessorProbe, modality: str) -> list[Any] | None:
    """The processor's output for one blank item of `modality` of each of `ITEM_FILLS`, in
    the first blank shape it accepts; None where it accepts none."""
    def processed(shape: probes.BlankShape) -> list[Any]:
        return [probe.call_one_item(probe.placeholder_text(modality),
                                    probes.blank_items(probe.processor, modality, 1, shape, fill=fill, kwargs=probe.default_kwargs),
                                    probe.default_kwargs)
                for fill in ITEM_FILLS]

    try:
        return probes.first_accepted_shape(probe.processor, modality, processed)[1]
    except probes.ProbeError:
        return None


def _handed_after(hf_model: torch.nn.Module, processed: Any, asked: torch.Tensor) -> torch.Tensor | None:
    """The rows the forward hands its decoder for `asked`, appended to one processed item's
    prompt; the processor's per-token fields are extended over them as over text (attention
    mask set, types zero)."""
    device = next(hf_model.parameters()).device
    dtype = next(hf_model.parameters()).dtype
    length = processed["input_ids"].shape[-1]
    kwargs = {}
    for key, value in processed.items():
        if not isinstance(value, torch.Tensor):
            kwargs[key] = value
            continue
        if key == INPUT_IDS:
            value = torch.cat([value, asked[None].to(value)], dim=1)
        elif value.dim() == 2 and value.shape == (1, length):
            more = torch.ones if key == ATTENTION_MASK else torch.zeros
            value = torch.cat([value, more(1, len(asked), dtype=value.dtype)], dim=1)
        kwargs[key] = value.to(device, dtype) if value.is_floating_point() else value.to(device)
    input_ids = kwargs.pop(INPUT_IDS)
    handed = features.handed_to_decoder(hf_model, input_ids, kwargs)
    return None if handed is None else handed["inputs_embeds"][0, length:]
