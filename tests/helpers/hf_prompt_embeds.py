"""transformers' token embeddings of a standard case's prompt, as a user hands them to vLLM
as `prompt_embeds` (a subprocess: an in-process engine changes HF classes).

    python tests/helpers/hf_prompt_embeds.py MODEL_DIR CASE OUT.pt   # saves {"ids": ..., "embeds": ...}
"""

import sys

import torch


def main():
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor

    model_dir, name, out = sys.argv[1:4]
    processor = load_processor(model_dir)
    prompt = parity.prompt_text(processor, parity.standard_cases(64)[name])
    ids = processor.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        embeds = parity.load_generation_model(model_dir).get_input_embeddings()(ids)[0]
    torch.save({"ids": ids[0].tolist(), "embeds": embeds}, out)


if __name__ == "__main__":
    main()
