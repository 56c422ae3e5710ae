"""`hf-bridge`: the command line.

`hf-bridge demo` builds (once, cached) a tiny model from real transformers classes,
serves it in vLLM through hf_bridge, prints the generation and checks it token for
token against transformers.
"""

from __future__ import annotations

import argparse
import os
import sys

from .help_format import SetDefaultsHelpFormatter
from .progress import progress


def demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if not args.verbose:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not args.multiprocess:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

    from .validate.checkpoint import remote_code_trusted

    with remote_code_trusted(args.trust_remote_code):
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    from .validate import parity
    from .validate.cases import cases_of
    from .validate.checkpoint import load_processor
    from .validate.engine import make_llm
    from .validate.reference import NotApplicable, references

    model_dir, side = _demo_checkpoint(args)
    case = parity.Case("demo", side, num_images=args.images, text=args.prompt)
    processor = load_processor(model_dir)
    with progress("Starting vLLM engine (model_impl='transformers', served by hf_bridge)"):
        takes_images = "one_image" in cases_of(model_dir)
        llm = make_llm(model_dir, limit_mm_per_prompt={"image": max(args.images, 1)} if takes_images else {})
    with progress("Generating"):
        got = parity.vllm_result(llm, processor, case)
    print()
    print(f"Prompt ({len(got.prompt_ids)} tokens, {args.images} image(s)): {parity.prompt_text(processor, case)!r}")
    print(f"Generated token ids: {got.tokens}")
    print(f"Generated text:      {processor.tokenizer.decode(got.tokens)!r}")
    if not args.model:
        print("(The tiny model's weights are random, so its text means nothing: what counts is that "
              "vLLM and transformers agree on it, token for token.)")

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


def _demo_checkpoint(args: argparse.Namespace):
    """(checkpoint directory, test image side) for the user's own `--model`, else the
    zoo's `--arch` (built once, then reused)."""
    from .validate.cases import IMAGE_SIDE, cases_of
    from .validate.checkpoint import checkpoint_dir, refuse_untrusted_code
    from .zoo import SPECS, build, cached, default_cache_dir

    if args.model:
        model_dir = checkpoint_dir(args.model, "hf-bridge demo")
        refuse_untrusted_code(model_dir, "hf-bridge demo")
        if args.images and "one_image" not in cases_of(model_dir):
            raise SystemExit(f"hf-bridge demo: {model_dir} has no image processor; run it with --images 0")
        return model_dir, IMAGE_SIDE
    spec = SPECS[args.arch]
    model_dir = cached(args.arch)
    if model_dir is not None:
        print(f"Using the tiny {args.arch} checkpoint built earlier in {model_dir}")
    else:
        with progress(f"Building tiny {args.arch} checkpoint (cached in {default_cache_dir()})"):
            model_dir = build(args.arch)
    return model_dir, spec.min_image_side


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
        formatter_class=SetDefaultsHelpFormatter,
    )
    d.add_argument(
        "--arch", choices=[a for a, s in SPECS.items() if s.servable], default="llava",
        help="tiny zoo architecture to serve (each keeps parity with transformers on a CPU, in every case transformers can run)",
    )
    d.add_argument("--model", help="serve your own checkpoint (a directory, or a hub id where the hub is reachable) instead of a tiny zoo model")
    d.add_argument("--prompt", default="Describe the image.", help="the user's text, after the images")
    d.add_argument("--images", type=int, choices=[0, 1, 2], default=1, help="number of (generated) test images")
    d.add_argument("--trust-remote-code", action="store_true", help="run your --model's own Python code (its `auto_map`), as transformers' and vLLM's flags of that name do; read it first")
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
