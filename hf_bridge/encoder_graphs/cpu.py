"""The encoder fast path on the CPU: vLLM's budget manager with frozen graphs.

vLLM builds its `EncoderCudaGraphManager` only in its GPU runner. On the CPU hf_bridge
builds the same manager itself, captures one frozen graph per budget (`frozen.py`) the
first time the encoder runs (after the weights are loaded), and encodes images through
it. Whether that pays is measured by `bench/encoder_graphs.py`; it is off unless
`HF_BRIDGE_CPU_ENCODER_GRAPHS=1`.
"""

from __future__ import annotations

import functools
import os

import torch
from vllm.logger import init_logger

from .. import LOGGER_NAME
from .frozen import standing_in_for_cuda_graphs

logger = init_logger(LOGGER_NAME)

OPTION = "HF_BRIDGE_CPU_ENCODER_GRAPHS"
DEFAULT = "0"
"""Off by default: see the README's encoder-graph table for the measured ratios."""


def cpu_graphs_requested() -> bool:
    return os.environ.get(OPTION, DEFAULT).strip().lower() in {"1", "true", "yes", "on"}


class CPUEncoderGraphs:
    """Holds the manager; captures lazily, once the model's weights are in place."""

    def __init__(self, vllm_config, model):
        self.vllm_config = vllm_config
        self.model = model
        self.manager = None

    @functools.cached_property
    def eligible(self) -> bool:
        """Asked on the first encode, once the weights are loaded: eligibility includes a
        trial capture of the tower, which needs them (`protocol.py`)."""
        return hasattr(self.model, "get_encoder_cudagraph_config")

    def execute(self, mm_kwargs: dict) -> list[torch.Tensor]:
        if self.manager is None:
            self.manager = self._capture()
        with torch.inference_mode():
            return self.manager.execute(mm_kwargs)

    def _capture(self):
        from vllm.v1.worker.encoder_cudagraph import EncoderCudaGraphManager

        param = next(self.model.parameters())
        manager = EncoderCudaGraphManager(self.vllm_config, param.device, param.dtype, self.model)
        with standing_in_for_cuda_graphs():
            manager.capture(graph_pool=None)
        logger.info("hf_bridge: captured %d CPU encoder graphs (budgets %s)", manager.get_num_graphs_to_capture(), manager.token_budgets)
        return manager
