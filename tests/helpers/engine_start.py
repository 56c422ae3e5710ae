"""An engine built in a clean interpreter, for checks that its start is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BUILD = """
import json, os, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from hf_bridge.validate.engine import make_llm
make_llm(sys.argv[1], **json.loads(sys.argv[2]))
"""


def start_engine(model_dir: str | Path, **engine_kwargs) -> subprocess.CompletedProcess:
    """hf_bridge's engine for `model_dir` (`make_llm`'s, with `engine_kwargs`), built in a
    process of its own (an in-process engine that raised must not leave its state to the
    tests after it)."""
    return subprocess.run([sys.executable, "-c", BUILD, str(model_dir), json.dumps(engine_kwargs)],
                          capture_output=True, text=True, timeout=900)
