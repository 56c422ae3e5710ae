"""hf_bridge: run any Hugging Face vision-language model in vLLM."""
