"""The library versions hf_bridge is built against, checked at start-up.

hf_bridge subclasses vLLM's in-tree Transformers backend and reads transformers'
processor conventions (`return_mm_token_type_ids`, `get_text_with_replacements`), both
of which move between releases; a version outside this range fails early with a clear
message instead of misbehaving later.
"""

from __future__ import annotations

from packaging.version import Version

SUPPORTED = {
    "vllm": ("0.32.0", "0.33.0"),
    "transformers": ("5.19.0", "5.20.0"),
}
"""Package -> [lowest supported, first unsupported)."""

class UnsupportedVersionError(ImportError):
    pass


def installed_version(package: str) -> str:
    if package == "vllm":
        import vllm

        return vllm.__version__
    import transformers

    return transformers.__version__


def check_versions() -> None:
    for package, (low, high) in SUPPORTED.items():
        found = installed_version(package)
        if not (Version(low) <= Version(Version(found).base_version) < Version(high)):
            raise UnsupportedVersionError(
                f"hf_bridge {__version__()} supports {package}>={low},<{high}, but {package} "
                f"{found} is installed. Install a supported {package} (see hf_bridge's "
                "README), or set HF_BRIDGE_DISABLE=1 to use vLLM's in-tree backend."
            )


def __version__() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hf_bridge")
    except PackageNotFoundError:
        return "unknown"


def log_handling(hf_config) -> None:
    """The one start-up line saying hf_bridge serves this model."""
    from vllm.logger import init_logger

    from . import LOGGER_NAME
    from .head import generation_class

    cls = generation_class(hf_config)
    arch = cls.__name__ if cls else (getattr(hf_config, "architectures", None) or ["?"])[0]
    init_logger(LOGGER_NAME).info(
        "hf_bridge %s handles %s (model_type=%s) through its generic wrapper.",
        __version__(),
        arch,
        getattr(hf_config, "model_type", "?"),
    )
