"""How the HF model encodes each of its processor's modalities: through its
`get_<modality>_features` entry, inside its own forward (where items of several such
modalities may change each other's encoding), or not at all (the modality is not served).
"""

from __future__ import annotations

from functools import cached_property

from . import errors
from .features import encodes_inline, features_entry_name
from .hf_classes import base_model_class

ENTRY, INLINE = "entry", "inline"
"""How the HF model encodes a modality: through its `get_<modality>_features`, or inside its own forward."""


class EncodingPathsMixin:
    """The processing info's view of how its modalities are encoded."""

    @cached_property
    def _encoding_paths(self) -> dict[str, str | None]:
        """How the HF model encodes each of the processor's modalities: through its entry
        (`ENTRY`), inside its own forward (`INLINE`, `features.encodes_inline`), or not at
        all (None). Empty where there is no model class to ask: the encoder says so if it must."""
        config = self.get_hf_config()
        model_class = base_model_class(config)
        if model_class is None:
            return {}
        paths: dict[str, str | None] = {}
        for modality in super()._get_supported_modalities():
            if features_entry_name(model_class, modality) is not None:
                paths[modality] = ENTRY
            else:
                paths[modality] = INLINE if encodes_inline(model_class, config, modality) else None
        return paths

    @cached_property
    def unencodable_modalities(self) -> dict[str, str]:
        """The processor's modalities that the HF model can encode neither through an entry
        nor inline, each with why it is not served."""
        unencodable = [m for m, path in self._encoding_paths.items() if path is None]
        if not unencodable:
            return {}
        model_name = base_model_class(self.get_hf_config()).__name__
        return {m: errors.modality_not_encodable(m, model_name, self.get_hf_processor()) for m in unencodable}

    @cached_property
    def inline_modalities(self) -> list[str]:
        """The processor's modalities that the HF model encodes inside its own forward:
        one forward, where they may change each other's encoding."""
        return [m for m, path in self._encoding_paths.items() if path == INLINE]
