"""vLLM's `SupportsEncoderCudaGraph` protocol, implemented once for every eligible model.

vLLM's `EncoderCudaGraphManager` owns budgets, packing, capture and replay; a model
only says what its inputs look like. For a tile-stack tower (`tiles.py`) that is:
one static buffer of `budget // tokens_per_tile` tiles, items' tiles copied into it in
order (the manager zeros the rest), the HF model's own `get_image_features` run on it,
and each item's rows sliced back out by its output-token count.

vLLM decides whether a model takes part with a runtime `Protocol` check, which looks
for the methods. One class serves every model, so for a model whose tower is not
eligible the methods are made to *not exist* (`_when_eligible`), and vLLM runs its
encoder eagerly; the reason is logged once.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
from vllm.logger import init_logger

from .. import LOGGER_NAME
from ..item_keys import DATA_KEY, NUM_EMBEDS_KEY
from ..split import unbatched
from .tiles import Ineligible, ProbedItem, TileLayout, budget_range, tile_layout

logger = init_logger(LOGGER_NAME)

MODALITY = "image"
"""Graphs serve images; a video's frames are not packed with them (vLLM groups items
by modality before encoding, and frame stacks have their own shapes)."""
PROBE_SIZES = ((64, 64), (300, 200))
"""Two blank images of different aspect and size: a tiling processor gives them
different tile counts, so a fixed per-tile output is tested, not assumed."""


def probe_tile_layout(info) -> TileLayout | Ineligible:
    """Process blank images with the model's processor and read the tile layout off them."""
    from .. import split

    if MODALITY not in info.supported_mm_limits:
        return Ineligible(f"the model takes no {MODALITY}s")
    probe = info.probes
    probes = []
    for width, height in PROBE_SIZES:
        out, expansion = probe.probe(MODALITY, probe.blank(MODALITY, 1, width, height), probe.default_kwargs)
        if expansion.encoder_modality != MODALITY:
            return Ineligible(f"its {MODALITY}s are encoded as {expansion.encoder_modality}")
        fields = {
            k: (tuple(out[k].shape), bool(out[k].is_floating_point()))
            for k in split.item_data_keys(list(out.keys()))
            if isinstance(out[k], torch.Tensor)
        }
        if len(fields) != len(split.item_data_keys(list(out.keys()))):
            return Ineligible("an item's data holds values that are not tensors")
        probes.append(ProbedItem(fields, expansion.num_embeds))
    return tile_layout(probes)


class _when_eligible:
    """A method that exists only on models whose tower is eligible (see module doc)."""

    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, objtype=None):
        if obj is not None and not isinstance(getattr(obj, "tile_layout", None), TileLayout):
            raise AttributeError(f"{self.fn.__name__}: this model's vision tower runs eagerly")
        return self.fn.__get__(obj, objtype) if obj is not None else self.fn


class EncoderGraphsMixin:
    """`SupportsEncoderCudaGraph` over `self.tile_layout`, for `HFBridgeForConditionalGeneration`."""

    supports_encoder_cudagraph: ClassVar[bool] = True

    def init_encoder_graphs(self, vllm_config) -> None:
        self._encoder_graphs_config = vllm_config

    @functools.cached_property
    def tile_layout(self) -> TileLayout | Ineligible:
        """Probed on first use (when vLLM's runner or the CPU path asks), not at start-up."""
        from vllm.multimodal import MULTIMODAL_REGISTRY

        try:
            info = MULTIMODAL_REGISTRY.create_processor(self._encoder_graphs_config.model_config).info
            layout = probe_tile_layout(info)
            if isinstance(layout, TileLayout):
                self._max_tiles_per_item = max(1, info.get_max_image_tokens() // layout.tokens_per_tile)
                layout = self._trial_capture(layout)
        except Exception as exc:  # noqa: BLE001 - any failure to probe means: run eagerly
            layout = Ineligible(f"probing its processor failed ({type(exc).__name__}: {exc})")
        if isinstance(layout, Ineligible):
            logger.info("hf_bridge: vision encoder graphs off for this model: %s", layout.reason)
        else:
            logger.info("hf_bridge: vision encoder graphs eligible: %s", layout)
        return layout

    def _trial_capture(self, layout: TileLayout) -> TileLayout | Ineligible:
        """Record the tower once over one blank tile in the frozen graph, which refuses what
        CUDA capture refuses: a tower that syncs with the host (Chameleon's VQ lookup copies
        to the CPU) would otherwise end engine start on a GPU, where vLLM does not catch
        capture errors."""
        from .frozen import CaptureRefused, FrozenGraph, frozen_graph

        weight = next(self.model.parameters())
        tiles = torch.zeros((1, *layout.tile_shape), device=weight.device, dtype=weight.dtype)
        try:
            with torch.inference_mode(), frozen_graph(FrozenGraph()):
                self._encode(MODALITY, {layout.field: tiles})
        except CaptureRefused as exc:
            return Ineligible(f"a trial capture of its tower failed: {exc}")
        return layout

    # -- configuration ------------------------------------------------------------------

    @_when_eligible
    def get_encoder_cudagraph_config(self):
        from vllm.v1.worker.encoder_cudagraph_defs import EncoderCudaGraphConfig

        return EncoderCudaGraphConfig(
            modalities=[MODALITY], buffer_keys=[self.tile_layout.field], out_hidden_size=self.text_config.hidden_size
        )

    @_when_eligible
    def get_input_modality(self, mm_kwargs: dict[str, Any]) -> str:
        return MODALITY

    @_when_eligible
    def get_max_frames_per_video(self) -> int:
        return 1

    @_when_eligible
    def get_encoder_cudagraph_budget_range(self, vllm_config) -> tuple[int, int]:
        mm_config = vllm_config.model_config.multimodal_config
        max_items = mm_config.get_limit_per_prompt(MODALITY) if mm_config is not None else 1
        max_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        return budget_range(self.tile_layout, self._max_tiles_per_item, max_items, max_tokens)

    # -- items ----------------------------------------------------------------------------

    def _tiles(self, mm_kwargs: dict[str, Any]) -> list[torch.Tensor]:
        return unbatched(mm_kwargs[DATA_KEY.format(MODALITY, self.tile_layout.field)])

    @_when_eligible
    def get_encoder_cudagraph_item_specs(self, mm_kwargs: dict[str, Any]):
        from vllm.v1.worker.encoder_cudagraph_defs import EncoderItemSpec

        counts = unbatched(mm_kwargs[NUM_EMBEDS_KEY.format(MODALITY)])
        return [EncoderItemSpec(input_size=t.shape[0], output_tokens=int(n)) for t, n in zip(self._tiles(mm_kwargs), counts)]

    @_when_eligible
    def select_encoder_cudagraph_items(self, mm_kwargs: dict[str, Any], indices: list[int]) -> dict[str, Any]:
        return {k: [unbatched(v)[i] for i in indices] for k, v in mm_kwargs.items()}

    # -- capture and replay -----------------------------------------------------------------

    @_when_eligible
    def prepare_encoder_cudagraph_capture_inputs(
        self, token_budget, max_batch_size, max_frames_per_batch, device, dtype, path="default", axis_keys=None
    ):
        from vllm.v1.worker.encoder_cudagraph_defs import EncoderCudaGraphCaptureInputs

        layout = self.tile_layout
        tiles = torch.zeros((layout.tiles_for_budget(token_budget), *layout.tile_shape), device=device, dtype=dtype)
        return EncoderCudaGraphCaptureInputs(values={layout.field: tiles})

    @_when_eligible
    def prepare_encoder_cudagraph_replay_buffers(self, mm_kwargs, max_batch_size, max_frames_per_batch, path="default"):
        from vllm.v1.worker.encoder_cudagraph_defs import EncoderCudaGraphReplayBuffers

        return EncoderCudaGraphReplayBuffers(values={self.tile_layout.field: torch.cat(self._tiles(mm_kwargs))})

    @_when_eligible
    def encoder_cudagraph_forward(self, inputs: dict[str, torch.Tensor], path: str = "default") -> torch.Tensor:
        """The HF model's own `get_image_features` over a buffer of tiles: one row block per tile."""
        return self._encode(MODALITY, {self.tile_layout.field: inputs[self.tile_layout.field]})

    @_when_eligible
    def postprocess_encoder_output(self, outputs, indices, per_item_out_tokens, dest, clone=False, batch_mm_kwargs=None):
        """Each item's rows, in packing order; rows of padding tiles are never read."""
        from vllm.model_executor.models.utils import scatter_output_slices

        scatter_output_slices(outputs["default"], indices, per_item_out_tokens, dest, clone)

    @_when_eligible
    def encoder_eager_forward(self, mm_kwargs: dict[str, Any], path: str = "default") -> torch.Tensor:
        return torch.cat(list(self.embed_multimodal_eagerly(dict(mm_kwargs))))
