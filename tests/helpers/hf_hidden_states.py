"""transformers' `hidden_states` for a standard case's prompt, from the multimodal base model
(a subprocess: an in-process engine changes HF classes).

    python tests/helpers/hf_hidden_states.py MODEL_DIR CASE OUT.pt
"""

import sys

import torch


def main():
    from hf_bridge.validate import parity
    from hf_bridge.validate.checkpoint import load_processor

    model_dir, name, out = sys.argv[1:4]
    case = parity.standard_cases(64)[name]
    model = parity.load_generation_model(model_dir)
    inputs = parity.model_inputs(model, load_processor(model_dir), case)
    with torch.no_grad():
        states = model.model(**inputs, output_hidden_states=True).hidden_states
    torch.save(torch.stack([s[0] for s in states]), out)


if __name__ == "__main__":
    main()
