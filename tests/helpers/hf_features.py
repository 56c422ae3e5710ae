"""The rows transformers' own `get_<modality>_features` makes of a case's media, saved with
the processor's size and timing metadata (a subprocess: an in-process engine changes HF
classes).

    python tests/helpers/hf_features.py MODEL_DIR SIDE CASE MODALITY OUT.pt

CASE names a standard case, or is a case's JSON key (`Case.key()`).
"""

import json
import sys

import torch


def main():
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from hf_bridge.embeds import GRID_FIELDS, POSITION_FIELDS, SIZES_FIELD
    from hf_bridge.validate import parity

    model_dir, side, name, modality, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    case = parity.Case(**json.loads(name)) if name.startswith("{") else parity.standard_cases(side)[name]
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs = parity.hf_inputs(processor, case)
    metadata = {k: v for k, v in inputs.items() if k in (*POSITION_FIELDS, SIZES_FIELD)}
    sizes = {k: v for k, v in metadata.items() if k in (*GRID_FIELDS, SIZES_FIELD)}
    pixels = {"image": "pixel_values", "video": "pixel_values_videos"}[modality]
    with torch.no_grad():
        output = getattr(model, f"get_{modality}_features")(inputs[pixels], **sizes, return_dict=True)
    rows = output.pooler_output
    rows = [r.reshape(-1, r.shape[-1]) for r in rows]
    torch.save({"rows": rows, "metadata": metadata}, out)


if __name__ == "__main__":
    main()
