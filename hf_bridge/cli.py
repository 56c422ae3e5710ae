"""`hf-bridge`: the command line.

`hf-bridge demo` builds (once, cached) a tiny model from real transformers classes,
serves it in vLLM through hf_bridge, prints the generation and checks it token for
token against transformers.
"""

from __future__ import annotations

import argparse
import os
import sys

from .progress import progress


def demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if not args.verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not args.multiprocess:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from .validate import parity
    from .validate.engine import make_llm
    from .validate.reference import NotApplicable, references
    from .zoo import SPECS, build, default_cache_dir

    spec = SPECS[args.arch]
    with progress(f"Building tiny {args.arch} checkpoint (cached in {default_cache_dir()})"):
        model_dir = build(args.arch)
    case = parity.Case("demo", spec.min_image_side, num_images=args.images, text=args.prompt)

    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    with progress("Starting vLLM engine (model_impl='transformers', served by hf_bridge)"):
        llm = make_llm(model_dir, limit_mm_per_prompt={"image": max(args.images, 1)})
    with progress("Generating"):
        got = parity.vllm_result(llm, processor, case)
    print()
    print(f"Prompt ({len(got.prompt_ids)} tokens, {args.images} image(s)): {parity.prompt_text(processor, case)!r}")
    print(f"Generated token ids: {got.tokens}")
    print(f"Generated text:      {processor.tokenizer.decode(got.tokens)!r}")

    with progress("Running the same prompt in transformers for the parity check"):
        (reference,) = references(model_dir, [case])
    if isinstance(reference, NotApplicable):
        print(f"Parity: not applicable, transformers itself fails: {reference.error}")
        return 0
    problems = parity.compare(reference, got)
    worst = max(
        (abs(a - b) for a, b in zip(reference.token_logprobs + reference.prompt_logprobs, got.token_logprobs + got.prompt_logprobs)),
        default=0.0,
    )
    if problems:
        print("Parity with transformers: FAIL")
        for p in problems:
            print(f"  - {p}")
        return 1
    print(
        f"Parity with transformers: PASS (prompt ids identical, {len(got.tokens)} greedy tokens identical, "
        f"max |log-prob difference| {worst:.1e} <= {parity.ATOL:.0e})"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .zoo import SPECS

    parser = argparse.ArgumentParser(prog="hf-bridge", description="Run Hugging Face VLMs in vLLM through hf_bridge.")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser(
        "demo",
        help="serve a tiny model through hf_bridge and check it against transformers",
        description=(
            "Build (once, cached under the user cache directory) a tiny randomly initialised "
            "checkpoint from real transformers classes, serve it in vLLM through hf_bridge, "
            "print the greedy generation and a parity verdict against transformers "
            "(identical prompt ids and tokens, log-probs within 1e-3). Runs offline on a CPU."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d.add_argument("--arch", choices=[a for a, s in SPECS.items() if s.servable], default="llava", help="tiny zoo architecture to serve")
    d.add_argument("--prompt", default="Describe the image.", help="the user's text, after the images")
    d.add_argument("--images", type=int, choices=[0, 1, 2], default=1, help="number of (generated) test images")
    d.add_argument("--multiprocess", action="store_true", help="run vLLM's engine core in its own process (vLLM's default; slower to start)")
    d.add_argument("--verbose", action="store_true", help="show vLLM's and transformers' logs")
    d.set_defaults(func=demo)
    from .validate.command import add_parser as add_validate

    add_validate(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
