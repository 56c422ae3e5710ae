"""EAGLE-3 drafts (`speculative_config={"method": "eagle3", ...}`) on hf_bridge's models.

An EAGLE-3 draft reads the decoder's hidden states after some of its layers. vLLM's
Transformers backend asks transformers to record them on the model it runs, but a
multimodal model's forward hands back its text model's last hidden state only, and the
runner's first step failed ("too many values to unpack (expected 2)"). Every HF
multimodal model passes its text model's `hidden_states` on, so hf_bridge asks the base
model for those (`output_hidden_states`) and hands the draft `hidden_states[layer]`: the
output of decoder layer `layer - 1`, what the in-tree backend records for a text model
and what transformers' own `output_hidden_states` gives the heads trained on it.

The base model runs outside vLLM's compiled region (its text model is compiled), so two
hooks on it carry the request and the states; the text model's own recording hooks are
installed before vLLM compiles it. A flat model (Chameleon), whose base model is its
decoder and returns what it records, takes the in-tree backend's way.

vLLM's EAGLE loader also reads `image_token_index` from the target's config for any
class it does not know by name, and hands it to the draft (which does not read it);
`name_image_token_index` gives configs that call it `image_token_id` that name too.
"""

from __future__ import annotations

import torch

OUTPUT_HIDDEN_STATES = "output_hidden_states"
LOADER_IMAGE_TOKEN = "image_token_index"
CONFIG_IMAGE_TOKEN = "image_token_id"


class Eagle3HiddenStatesMixin:
    """Goes before vLLM's `MultiModalMixin`, whose forward it wraps."""

    aux_hidden_state_layers: tuple[int, ...] = ()

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        text_model = self.get_language_model().model
        if text_model is self.model:
            super().set_aux_hidden_state_layers(layers)  # the in-tree way: its decoder returns what it records
            return
        from transformers.utils.output_capturing import maybe_install_capturing_hooks

        # transformers installs them at the first call that asks, under a lock vLLM's compiler cannot trace
        maybe_install_capturing_hooks(text_model)
        self.aux_hidden_state_layers = tuple(layers)
        self._recorded_hidden_states: list[tuple[torch.Tensor, ...]] | None = None
        self.model.register_forward_pre_hook(self._ask_for_hidden_states, with_kwargs=True)
        self.model.register_forward_hook(self._record_hidden_states)

    def _ask_for_hidden_states(self, module, args, kwargs):
        if self._recorded_hidden_states is None:
            return None  # a call outside the step's forward (an encoder that runs the base model inline)
        return args, {**kwargs, OUTPUT_HIDDEN_STATES: True}

    def _record_hidden_states(self, module, args, output) -> None:
        if self._recorded_hidden_states is not None:
            self._recorded_hidden_states.append(_hidden_states_of(output))

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **kwargs):
        if not self.aux_hidden_state_layers:
            return super().forward(input_ids, positions, intermediate_tensors, inputs_embeds, **kwargs)
        self._recorded_hidden_states = []
        try:
            output = super().forward(input_ids, positions, intermediate_tensors, inputs_embeds, **kwargs)
            (states,) = self._recorded_hidden_states
        finally:
            self._recorded_hidden_states = None
        if not isinstance(output, torch.Tensor):
            return output  # not the last pipeline rank
        return output, [states[layer][0] for layer in self.aux_hidden_state_layers]


def _hidden_states_of(output) -> tuple[torch.Tensor, ...]:
    """The base model's `hidden_states`: by name, or (as vLLM calls it, `return_dict=False`)
    the first tuple after the last hidden state."""
    states = getattr(output, "hidden_states", None)
    if states is None:
        states = next(item for item in output[1:] if isinstance(item, tuple))
    return states


def name_image_token_index(config) -> None:
    if getattr(config, LOADER_IMAGE_TOKEN, None) is None:
        setattr(config, LOADER_IMAGE_TOKEN, getattr(config, CONFIG_IMAGE_TOKEN, None))
