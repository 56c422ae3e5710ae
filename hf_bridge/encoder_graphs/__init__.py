"""Vision-encoder graphs over token budgets, for any HF tower made of fixed-shape tiles.

- `tiles.py` (pure): which towers are eligible, budgets;
- `protocol.py`: vLLM's `SupportsEncoderCudaGraph` on hf_bridge's model (GPU runners
  use it through vLLM's own `compilation_config` switches);
- `frozen.py`: a graph recorded at the operator level, standing in for a CUDA graph
  where there is no GPU (tests) and backing the CPU path;
- `cpu.py`: the optional CPU fast path (`HF_BRIDGE_CPU_ENCODER_GRAPHS=1`).
"""
