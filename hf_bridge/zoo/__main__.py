"""`python -m hf_bridge.zoo NAME --dir DIR`: build one tiny checkpoint in this interpreter."""

import argparse
from pathlib import Path

from .build import build_here
from .specs import SPECS

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("name", choices=list(SPECS))
parser.add_argument("--dir", type=Path, required=True)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
print(build_here(args.name, args.dir, args.seed))
