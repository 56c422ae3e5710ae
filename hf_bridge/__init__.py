"""hf_bridge: run any Hugging Face vision-language model in vLLM."""

LOGGER_NAME = "vllm.hf_bridge"
"""hf_bridge logs under vLLM's logger, so its lines (the start-up line among them) appear
wherever and however vLLM's do (`VLLM_LOGGING_LEVEL`, `VLLM_LOGGING_CONFIG_PATH`): vLLM
configures only its own "vllm" loggers, and a plain "hf_bridge" logger had no handler."""

from . import inspect  # noqa: E402  (callable: `hf_bridge.inspect(model_dir, prompt, images=[...])`)

__all__ = ["LOGGER_NAME", "inspect"]
