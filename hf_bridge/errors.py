"""Messages for bad requests: each names the problem and what to do about it.

They are raised while a request is processed (as `ValueError`, which vLLM turns into a
400 for that request), so the engine goes on serving the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_PLURAL = {"image": "images", "video": "videos", "audio": "audios"}
_ONE = {"image": "an image", "video": "a video", "audio": "an audio clip"}


def _processors_error(exc: BaseException) -> str:
    """An error's type and first line; a processor's own, under the one vLLM wraps it in naming the call."""
    cause = exc.__cause__ or exc
    reason = str(cause).splitlines()[0][:300] if str(cause) else ""
    return f"{type(cause).__name__}: {reason}" if reason else type(cause).__name__


def placeholder_mismatch(modality: str, placeholder: str, found: int, given: int,
                         expanded: tuple[str, int] | None = None) -> str:
    """`expanded`: an embedding token the prompt holds over and over, and how many times in a row."""
    counts = (f"The prompt holds {found} {modality} placeholder(s) ({placeholder!r}) but the request "
              f"carries {given} {_PLURAL.get(modality, modality)}.")
    if expanded is not None:
        token, run = expanded
        return (
            f"{counts} It holds {token!r} {run} times in a row, as the HF processor's `input_ids` do once it has "
            "expanded each placeholder: vLLM expands each placeholder itself, so send the prompt as the processor "
            f"takes it (the text, or the tokenizer's ids of it), with one {placeholder!r} per {modality}."
        )
    return (
        f"{counts} Give exactly one {modality} per placeholder: add or remove {modality}s, or placeholders "
        "(applying the model's chat template to messages with one {'type': '" + modality + "'} part per item does this)."
    )


def embedding_tokens_outside_items(modality: str, token: str, count: int, placeholder: str | None,
                                   inserting_processor: Any = None) -> str:
    """`inserting_processor`: the processor, where it inserts each item itself (no placeholder)."""
    if inserting_processor is not None:
        per_item = f", without it: {type(inserting_processor).__name__} inserts each {modality} itself"
    else:
        per_item = f", with one {placeholder!r} per {modality}" if placeholder else ""
    return (
        f"The prompt holds {token!r} {count} time(s) outside its {_PLURAL.get(modality, modality)}' placeholders: "
        f"the model reads {modality} embeddings at that token, so it belongs inside an item's expansion alone. "
        "The HF processor's `input_ids` hold it so once it has expanded each placeholder, and vLLM expands each "
        f"placeholder itself: send the prompt as the processor takes it (the text, or the tokenizer's ids of "
        f"it){per_item}."
    )


def placeholder_not_wanted(modality: str, placeholder: str, found: int, processor: Any) -> str:
    return (
        f"The prompt holds {found} {modality} placeholder(s) ({placeholder!r}), but "
        f"{type(processor).__name__} inserts each {modality} into the prompt itself, at the start. "
        f"Remove the placeholder(s) from the prompt and send the {_PLURAL.get(modality, modality)} alone."
    )


def unsupported_modality(modality: str, supported: Mapping[str, Any], processor: Any) -> str:
    takes = ", ".join(sorted(supported)) or "no multimodal"
    return (
        f"This model does not take {modality} input: its processor ({type(processor).__name__}) "
        f"takes {takes} input only. Remove the {modality} from the request, or serve a model "
        f"whose processor has a {modality} processor."
    )


PIXEL_CHANNELS = (1, 3)
"""The channel counts transformers finds on a first or last axis of an image array (grey, RGB)."""


def unprocessable_item(modality: str, index: int, exc: BaseException, shape: tuple[int, ...] = (), described: str = "") -> str:
    frame = shape[1:] if modality == "video" else shape
    if modality == "audio" and len(shape) > 1:  # speech feature extractors take one channel
        fix = f"it holds an array of shape {shape}: send the clip as mono samples (one dimension; average its channels)."
    elif modality in ("image", "video") and len(frame) == 3 and not {frame[0], frame[-1]} & set(PIXEL_CHANNELS):
        pil = "" if modality == "video" else ", or send a PIL image (`Image.fromarray(array)`), which the processor converts to RGB"
        fix = (f"it holds an array of shape {shape}, and transformers finds the channels of "
               f"{'each frame' if modality == 'video' else 'an image'} on a first or last axis of "
               f"{' or '.join(map(str, PIXEL_CHANNELS))} (grey or RGB). Drop the alpha channel (`array[..., :3]`){pil}.")
    else:
        named = "a clip's length, for one" if modality == "audio" else "a size, shape or aspect ratio"
        fix = f"change what its message names ({named}), or check that the {modality} is valid and decodable."
    return (
        f"{modality.capitalize()} {index} of this request{f' ({described})' if described else ''} could not be processed by the model's "
        f"HF processor ({_processors_error(exc)}). Send {_ONE.get(modality, modality)} the processor "
        f"takes: {fix}"
    )


def pixels_scaled_twice(modality: str, index: int, processor: Any) -> str:
    return (
        f"{modality.capitalize()} {index} of this request holds float pixels within [0, 1] (as torchvision's "
        f"`ToTensor` or `array / 255` give them), and {type(processor).__name__} divides pixels by 255 itself "
        f"(`do_rescale`), so the model would see the {modality} nearly black. Send its pixels in 0-255: a PIL "
        f"image, uint8 pixels (`(pixels * 255).round()`, cast to uint8) or floats in 0-255; or keep these and "
        "pass `mm_processor_kwargs={'do_rescale': False}`."
    )


def audio_samples_as_pcm(index: int, dtype: Any, peak: float, processor: Any) -> str:
    return (
        f"Audio {index} of this request holds {dtype} samples reaching {peak:g}, as PCM (`scipy.io.wavfile.read` "
        f"gives int16), and {type(processor).__name__}'s feature extractor takes floats within [-1, 1], so the "
        "model would hear the clip thousands of times louder. Send it as floats within [-1, 1]: `clip / 32768` "
        "for int16, or as soundfile and torchaudio read it."
    )


def audio_clip_too_short(index: int, seconds: float, placed: float, processor: Any) -> str:
    return (
        f"Audio {index} of this request lasts {seconds:.4f} s, and {type(processor).__name__} gives it no "
        "embedding position: too short a clip for the model to hear anything of. Send a longer clip "
        f"(hf_bridge places a clip of {placed:g} s), or leave it out of the request."
    )


def item_gets_no_tokens(modality: str, index: int, sent: str, processor: Any, example: str | None) -> str:
    return (
        f"{_item_named(modality, index, sent)} gets no tokens from {type(processor).__name__}: it "
        f"expands the {modality}'s placeholder to nothing, so the model would not see the {modality} "
        f"(transformers runs such a prompt without it, silently). Send {_other_item(modality, example)}, or leave it out of the request."
    )


def item_gets_no_features(modality: str, index: int, sent: str, processor: Any, positions: int,
                          empty: dict[str, tuple[int, ...]], example: str | None) -> str:
    return (
        f"{_item_named(modality, index, sent)} gets no features from {type(processor).__name__}: it gives the "
        f"{modality} {positions} embedding position(s) but an empty {_fields_by_shape(empty)}, so the model's "
        f"encoder would have nothing of it to encode. Send {_other_item(modality, example)}, or leave it out of the request."
    )


def item_features_not_numbers(modality: str, index: int, sent: str, processor: Any, fields: dict[str, tuple[int, ...]]) -> str:
    other = "a longer clip" if modality == "audio" else f"another {modality}"  # Parakeet's: a clip of one or two frames
    return (
        f"{_item_named(modality, index, sent)} gets features that are not numbers from {type(processor).__name__}: "
        f"its {_fields_by_shape(fields)} hold NaN, so nothing the model generated from them would mean anything "
        f"(transformers generates from the same NaN). Send {other}, or leave it out of the request."
    )


def _item_named(modality: str, index: int, sent: str) -> str:
    return f"{modality.capitalize()} {index} of this request{f' ({sent})' if sent else ''}"


def _fields_by_shape(fields: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"`{key}` of shape {shape}" for key, shape in fields.items())


def _other_item(modality: str, example: str | None) -> str:
    """What to send instead of an item the processor gives nothing usable: a longer clip,
    or a larger image or video (`example`: one the processor places)."""
    return ("a longer clip" if modality == "audio" else f"a larger {modality}") + (f" ({example})" if example else "")


def unnumberable_item(modality: str, index: int, exc: BaseException, processor: Any) -> str:
    return (
        f"{type(processor).__name__} writes each {modality}'s position among the prompt's "
        f"{_PLURAL.get(modality, modality)} into its tokens, and hf_bridge cannot number {modality} {index} "
        f"of this request as transformers would ({exc}). Send at most {index} "
        f"{_PLURAL.get(modality, modality)} per request, or switch the numbering off where the processor "
        "allows it (MiniCPM-V: `mm_processor_kwargs={'use_image_id': False}`)."
    )


_ACCEPTED = {
    "image": "a PIL.Image, an HxWxC numpy array, or precomputed embeddings (a torch tensor); "
             "several as a list of them, or as one NxHxWxC array",
    "video": "a sequence of frames: a TxHxWxC numpy array, a list of PIL images, or a (frames, metadata) pair; "
             "several as a list of them, or as one NxTxHxWxC array",
}
_ITEM_NDIM = {"image": 3, "video": 4}
"""The dimensions of an array vLLM's parser reads as one item; one of others, as a batch
of items along its first axis (a 3-D torch tensor: embeddings)."""


def check_media_types(mm_data: Mapping[str, Any]) -> None:
    """Reject media that no processor can read, before anything is processed, each item
    numbered as vLLM's parser reads the request's data."""
    for modality, value in mm_data.items():
        if modality == "audio" and _channels_last_clip(value):
            raise ValueError(channels_read_as_clips(tuple(value.shape)))
        if modality not in _ACCEPTED or value is None:
            continue
        batch = _read_as_batch(modality, value)
        items = list(value) if batch or isinstance(value, list) else [value]
        for index, item in enumerate(items):
            problem = _media_problem(modality, item)
            if problem and batch:
                problem += (f", one of {len(items)} along the first axis of the request's array of shape "
                            f"{tuple(value.shape)}, which vLLM reads as {len(items)} {_PLURAL[modality]} "
                            f"(an array of {_ITEM_NDIM[modality]} dimensions is one {modality})")
            if problem:
                raise ValueError(
                    f"{modality.capitalize()} {index} of this request cannot be read as {modality}: "
                    f"{problem}. Pass {_ACCEPTED[modality]}."
                )


MOST_AUDIO_CHANNELS = 8
"""A clip's second dimension up to this is its channels: as clips, its rows would be too
short for any model to give them a position (8 samples: half a millisecond at 16 kHz)."""


def _channels_last_clip(value: Any) -> bool:
    """A bare (samples, channels) array, as soundfile reads a stereo clip: vLLM's parser
    reads each row of a 2-D array as a clip of its own."""
    import numpy as np
    import torch

    return isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim == 2 and value.shape[1] <= MOST_AUDIO_CHANNELS


def channels_read_as_clips(shape: tuple[int, ...]) -> str:
    return (
        f"The request's audio is an array of shape {shape}, which vLLM reads as {shape[0]} clips of {shape[1]} "
        f"sample(s) each, one per row: a clip of {shape[1]} channels, as soundfile reads one (samples x channels). "
        "Send the clip as `(array, sampling_rate)`, which hf_bridge averages to one channel, or as mono samples, "
        "one dimension (`array.mean(axis=1)`); several clips as a list of them."
    )


def audio_rows_read_as_clips(shape: tuple[int, ...]) -> str:
    return (
        f"The request's audio is one array of shape {shape}, which vLLM reads as {shape[0]} clips, one per row. "
        "If its rows are one clip's channels (channels x samples, as torchaudio loads a clip), send it as "
        "`(array, sampling_rate)`, which hf_bridge averages to one channel, or as mono samples "
        "(`array.mean(axis=0)`); several clips as a list of them."
    )


def embeddings_not_taken(modality: str, value: Any) -> str:
    """`value`: one 3-D tensor, or a list of 2-D ones (vLLM's two readings as embeddings)."""
    one_tensor = hasattr(value, "shape")
    sent = f"a torch tensor of shape {tuple(value.shape)}" if one_tensor else f"a list of {len(value)} 2-D torch tensors"
    pixels = (
        " If it holds pixels (channels x height x width, as torchvision reads an image), send it in a "
        "list, `[tensor]`, which vLLM reads as one image per tensor, or as an HxWxC array "
        "(`tensor.permute(1, 2, 0).numpy()`)." if modality == "image" and one_tensor else ""
    )
    return (
        f"The request's {modality} data is {sent}, which vLLM reads as precomputed {modality} embeddings "
        f"({_PLURAL[modality]} x rows x hidden size{'' if one_tensor else ', a tensor per item'}), and this "
        f"engine takes no embeddings.{pixels} To send embeddings, start the engine with `enable_mm_embeds=True`."
    )


def _read_as_batch(modality: str, value: Any) -> bool:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor) and value.ndim == 3:
        return False  # embeddings
    return isinstance(value, (np.ndarray, torch.Tensor)) and value.ndim >= 2 and value.ndim != _ITEM_NDIM[modality]


def _media_problem(modality: str, item: Any) -> str | None:
    """What makes `item` unreadable, for the cases that are certain; other types pass
    on to vLLM's parser (which knows its own wrappers, such as `MediaWithBytes`)."""
    import numpy as np
    import torch

    if isinstance(item, (str, bytes)):
        return f"got {type(item).__name__} {str(item)[:40]!r}, not decoded media"
    if modality == "video" and isinstance(item, tuple) and item:
        item = item[0]
    ndims = {"image": (2, 3), "video": (3, 4)}[modality]
    if isinstance(item, (np.ndarray, torch.Tensor)) and item.ndim not in ndims:
        return f"got an array of shape {tuple(item.shape)}"
    return None


def processor_kwargs_refused(exc: BaseException) -> str:
    return (
        f"The model's HF processor refused a value of the processor kwargs ({_processors_error(exc)}). "
        "Fix the value it names, or leave that key out of `mm_processor_kwargs` (the "
        "request's or the engine's) to keep the checkpoint's own setting."
    )


def processor_kwargs_ignored(keys: list[str], closest: Mapping[str, str | None], processor: Any, whose: str) -> str:
    """`whose`: "request's" or "engine's"."""
    named = ", ".join(repr(key) + (f" (did you mean {closest[key]!r}?)" if closest.get(key) else "") for key in keys)
    it, key = ("it", "the key") if len(keys) == 1 else ("them", "the keys")
    made = "the reply would be made" if whose == "request's" else "every reply would be made"
    return (
        f"The {whose} `mm_processor_kwargs` hold {named}, which {type(processor).__name__} takes nowhere: "
        f"transformers would ignore {it}, saying so in the server's log only, and {made} "
        f"without {it}. Fix the name, or leave {key} out."
    )


def tensor_type_refused(asked: object, whose: str) -> str:
    """`whose`: "request's" or "engine's"."""
    return (
        f"The {whose} `mm_processor_kwargs` set return_tensors={asked!r}: vLLM asks the processor for torch "
        "tensors ('pt') and hands them to the model, whose encoder takes no other kind (numpy arrays raised in the "
        "engine's worker, which stopped the engine). Leave `return_tensors` out of `mm_processor_kwargs`."
    )


def kwargs_truncate_the_text(cut_to: int, prompt_tokens: int) -> str:
    return (
        f"This request's processor kwargs truncate the text to {cut_to} tokens, and its prompt holds "
        f"{prompt_tokens}: transformers' processor would cut the prompt there (and refuses a cut through an item's "
        "placeholder), but vLLM tokenizes the prompt itself and hands the processor a short text of each item's "
        f"own, so the prompt would run whole. Leave `truncation` out of `mm_processor_kwargs`, and send a prompt of "
        f"at most {cut_to} tokens if that is the length you meant."
    )


def video_sampled_twice(index: int, kept: int, total: int) -> str:
    return (
        f"Video {index} of this request holds {kept} of its {total} frames: vLLM's video loader sampled it "
        "already (its `num_frames`, 32 unless `media_io_kwargs` say otherwise), and the processor kwargs ask "
        "the processor to sample frames too (do_sample_frames), by the whole video's frame count. Have vLLM "
        "load every frame (`--media-io-kwargs '{\"video\": {\"num_frames\": -1}}'`, or the request's "
        "`media_io_kwargs`), or leave do_sample_frames out of `mm_processor_kwargs` to keep the frames vLLM loaded."
    )


def video_sampled_without_metadata(index: int, exc: BaseException) -> str:
    return (
        f"Video {index} of this request could not be processed by the model's HF processor "
        f"({_processors_error(exc)}). The processor kwargs ask it to sample frames by time (`fps`), "
        "which needs each video's frame rate and frame count, and the video reached it without its metadata "
        "(a request's videos go to the processor with their metadata only when every one of them has it). "
        "Send every video as a `(frames, metadata)` pair, such as "
        "`(frames, {\"fps\": 24.0, \"total_num_frames\": len(frames), \"frames_indices\": list(range(len(frames)))})`, "
        "or by URL (vLLM's video loader gives the metadata), or ask for a number of frames instead "
        "(`mm_processor_kwargs={\"num_frames\": N}`), which needs no metadata."
    )


def audio_clip_cut(index: int, seconds: float, longest: float, processor: Any) -> str:
    return (
        f"Audio {index} of this request lasts {seconds:.1f} s, and {type(processor).__name__} keeps at most "
        f"{longest:g} s of a clip (its feature extractor's length; transformers cuts the rest, and the "
        f"model's audio encoder takes no more). Split the clip into pieces of at most {longest:g} s, one "
        "audio each, or ask for the cut: `mm_processor_kwargs={'truncation': True}` keeps the first "
        f"{longest:g} s, as transformers does."
    )


def kwargs_change_positions_only(modality: str, positions: int, plain_positions: int, processor: Any) -> str:
    return (
        f"This request's processor kwargs give its {modality} {positions} embedding position(s) "
        f"where {type(processor).__name__} gives it {plain_positions} without them, yet they change "
        f"nothing the model encodes the {modality} from, so the model would fill {plain_positions}: "
        "such a kwarg (`patch_size`, `vision_feature_select_strategy`, ...) must match the model's "
        "config. Leave it out of `mm_processor_kwargs`, or save it in the checkpoint's config and "
        "processor alike."
    )


def kwargs_unplaceable(modality: str, index: int, exc: BaseException, keys: list[str]) -> str:
    return (
        f"This request's processor kwargs ({', '.join(keys)}) make the processor lay {modality} {index} out "
        f"in the prompt otherwise than hf_bridge can place it ({exc}); without them it is placed. Leave "
        "them out of `mm_processor_kwargs`, or save the setting in the checkpoint's processor, where "
        "hf_bridge learns the layout at start."
    )


PADDING_KWARGS = ("padding", "max_length", "pad_to_multiple_of")
"""The tokenizer kwargs that pad a prompt's text."""

_PADDING_IS_FOR_BATCHES = (
    f"Padding ({', '.join(f'`{key}`' for key in PADDING_KWARGS)}) shapes a batch of prompts for transformers, which "
    "masks the pad tokens; vLLM serves each prompt alone and unpadded, and would have run them inside the prompt."
)


def kwargs_pad_the_text(modality: str, index: int, added: int, pad_token_id: int) -> str:
    return (
        f"This request's processor kwargs pad the prompt's text: {added} of the tokenizer's pad token "
        f"(id {pad_token_id}) came with {modality} {index}, and none without them. {_PADDING_IS_FOR_BATCHES} "
        "Leave these keys out of `mm_processor_kwargs`."
    )


def engine_kwargs_pad_the_text(padding: Mapping[str, Any], added: int, pad_token_id: int) -> str:
    return (
        f"The engine's `mm_processor_kwargs` pad every prompt's text ({dict(padding)}): {added} of the "
        f"tokenizer's pad token (id {pad_token_id}) came with them, and none with padding off. "
        f"{_PADDING_IS_FOR_BATCHES} Leave these keys out of the engine's `mm_processor_kwargs`."
    )


def kwargs_change_pixel_sides(modality: str, index: int, changed: Mapping[str, tuple[Any, Any]], processor: Any) -> str:
    key, (sides, fixed) = next(iter(changed.items()))
    got = "no longer an image layout" if sides is None else f"{sides[0]}x{sides[1]} pixels"
    return (
        f"This request's processor kwargs give {modality} {index} `{key}` of {got}, where "
        f"{type(processor).__name__} gives every {modality} {fixed[0]}x{fixed[1]} without them: the "
        f"model's vision encoder is built for that size (its position table, or its placeholder's "
        "count of features), and another would stop the engine. Leave the size kwargs "
        "(`do_resize`, `size`, `crop_size`, ...) out of the request's `mm_processor_kwargs`; for a "
        "model whose encoder does take another size, set them for the engine instead "
        "(`LLM(mm_processor_kwargs=...)`): requests are checked against the engine's sizes."
    )


def no_token_types(processor: Any) -> str:
    return (
        f"{type(processor).__name__} returns no `mm_token_type_ids` (nor `token_type_ids`) "
        "when called with `return_mm_token_type_ids=True`, and lists no multimodal tokens "
        "(`image_token_ids`, `video_token_ids`, `audio_token_ids`) nor names one its tokenizer "
        "holds (`image_token`, ...) to type them by, so "
        "hf_bridge cannot tell which prompt tokens belong to which item. A processor that "
        "sets them as transformers' `ProcessorMixin` expects reports them."
    )


def modality_switched_off(modality: str, why: str, processor: Any, engine_kwargs: Mapping[str, Any] | None = None) -> str:
    return (
        f"hf_bridge switched {modality} input off for this model: {type(processor).__name__} could "
        f"not be probed with a blank {modality} ({why}), so hf_bridge cannot tell where a {modality} "
        f"goes in the prompt. Text and the model's other inputs are served. "
    ) + _engine_kwargs_first(
        f"Remove the {_PLURAL.get(modality, modality)} from the request, or serve this model with "
        "vLLM's in-tree backend (HF_BRIDGE_DISABLE=1).", engine_kwargs)


def largest_item_not_processed(modality: str, size: str, processor: Any, error: BaseException, counted: int) -> str:
    cause = error.__cause__ or error
    return (
        f"hf_bridge profiles {modality} items with {type(processor).__name__}'s own count ({counted} tokens): "
        f"the processor could not process the largest blank {modality} ({size}; {type(cause).__name__}: {cause}), "
        f"whose placeholder hf_bridge counts too. A {modality} the processor cannot process is refused with its error."
    )


def media_not_served_per_layer_inputs(modality: str, processor: Any) -> str:
    return (
        f"hf_bridge does not serve {modality} input for this model: its decoder adds per-layer "
        f"embeddings looked up by token id (`hidden_size_per_layer_input`), and neither its HF "
        f"model's forward nor its text model's takes `per_layer_inputs` to hand them in, while vLLM hands the decoder "
        f"embeddings only, which transformers cannot map back to ids at {modality} positions. "
        f"Text prompts are served; remove the {_PLURAL.get(modality, modality)} from the request. "
        f"({type(processor).__name__})"
    )


def modality_not_encodable(modality: str, model_class: str, processor: Any) -> str:
    return (
        f"hf_bridge does not serve {modality} input for this model: {model_class} has no "
        f"`get_{modality}_features`, the entry through which hf_bridge (and vLLM's in-tree backend) "
        f"encode {modality} items, and its config names no `{modality}_token_id` at which its "
        f"forward would place them, where hf_bridge could take them. Text and the model's other "
        f"inputs are served; remove the {_PLURAL.get(modality, modality)} from the request. "
        f"({type(processor).__name__})"
    )


def modalities_encoded_together(modalities: list[str], model_class: str, processor: Any) -> str:
    listed = " and ".join(_PLURAL.get(m, m) for m in sorted(modalities, key=list(_PLURAL).index))
    return (
        f"This request carries {listed}, which {model_class} encodes inside one forward, where one "
        f"modality can change how another is encoded (Phi-4-multimodal projects audio otherwise beside "
        f"an image). hf_bridge encodes each item alone, so such a request would not match transformers. "
        f"Send the {listed} in separate requests. ({type(processor).__name__})"
    )


def items_touch(first: tuple[str, int], second: tuple[str, int], model_class: str, error: BaseException) -> str:
    (modality, index), (other, other_index) = first, second
    return (
        f"{modality}[{index}] and {other}[{other_index}] of this request have no text between them, and "
        f"{model_class} lays its M-RoPE positions out by runs of one token type: it reads the two as one "
        f"{modality}, and transformers cannot lay the prompt out ({_processors_error(error)}). "
        "Put text between the items, as the model's chat template does (it marks each item): format the "
        "prompt with the chat template, or send it through the chat API."
    )


def touching_items_unchecked(model_class: str, error: BaseException) -> str:
    return (
        f"hf_bridge cannot build {model_class} without weights to check the M-RoPE positions of a prompt "
        f"whose media items have no text between them ({_processors_error(error)}); such a "
        "prompt goes to the engine unchecked, where the model may fail to lay it out."
    )


def experts_without_top_k(num_experts: int, fields: tuple[str, ...], text_config: Any, vllm_loaded_as: str | None) -> str:
    """vLLM resolved a mixture-of-experts class, but the config the HF model is built from
    says how many experts each token takes under none of the names read. `vllm_loaded_as`:
    vLLM's own config class, where hf_bridge built the HF model from transformers' instead."""
    why = (f" vLLM read the checkpoint with its own {vllm_loaded_as}, which describes another layout "
           f"than transformers' config; serve it with model_impl=\"vllm\", which reads it that way.") if vllm_loaded_as else (
        " Name the count in the checkpoint's text config (hf_overrides={\"text_config\": {\"num_experts_per_tok\": K}}).")
    return (f"vLLM counts {num_experts} experts in this checkpoint, but the HF text config "
            f"({type(text_config).__name__}) names no experts-per-token count ({', '.join(fields)}, nor another name vLLM reads), "
            f"so vLLM's fused-MoE layer cannot be built.{why}")


def per_layer_inputs_need_one_pipeline_rank(model_class: str, pipeline_size: int) -> str:
    return (
        f"pipeline_parallel_size={pipeline_size} cannot serve {model_class}: its decoder adds, at every "
        f"layer, embeddings computed from the token ids and input embeddings, which only the first "
        f"pipeline rank has. Use tensor_parallel_size to spread it over devices instead."
    )


def token_tables_need_one_pipeline_rank(model_class: str, fields: list[str], pipeline_size: int) -> str:
    return (
        f"pipeline_parallel_size={pipeline_size} cannot serve {model_class}: its decoder layers read "
        f"{', '.join(fields)}, which hf_bridge derives from the token ids, and only the first pipeline "
        f"rank has them. Use tensor_parallel_size to spread it over devices instead."
    )


def prompt_embeds_without_token_ids(model_class: str, read_by_id: list[str]) -> str:
    return (
        f"enable_prompt_embeds cannot serve {model_class}: its decoder reads {' and '.join(read_by_id)}, which "
        f"are looked up by token id, and a prompt given as embeddings carries no ids. Its output would "
        f"silently differ from the same prompt's tokens. Start the engine without enable_prompt_embeds, "
        f"and send token ids or text."
    )


def kv_sharing_fast_prefill_unserved(model_class: str, sharing: int) -> str:
    return (
        f"kv_sharing_fast_prefill cannot serve {model_class}: it gives the {sharing} decoder layer(s) that read an "
        f"earlier layer's KV cache only the prompt tokens whose logits are needed, while hf_bridge runs "
        f"transformers' decoder, which computes every layer over every token; the output would silently differ "
        f"from transformers'. Start the engine without kv_sharing_fast_prefill."
    )


def side_features_by_layer_need_one_pipeline_rank(model_class: str, pipeline_size: int) -> str:
    return (
        f"pipeline_parallel_size={pipeline_size} cannot serve {model_class}: its vision tower feeds decoder "
        f"layers named in its encoder output, which only the first pipeline rank computes. Use "
        f"tensor_parallel_size to spread it over devices instead."
    )


def nothing_placeable(failures: Mapping[str, str], processor: Any, engine_kwargs: Mapping[str, Any] | None = None) -> str:
    reasons = "; ".join(f"{m}: {why}" for m, why in failures.items()) or "it has no image, video or audio processor"
    return (
        f"hf_bridge cannot place any multimodal item for {type(processor).__name__} ({reasons}). "
    ) + _engine_kwargs_first(
        "Select vLLM's in-tree backend for it with HF_BRIDGE_DISABLE=1, or let hf_bridge route it "
        "there itself by not naming hf_bridge's architecture in `hf_overrides`.", engine_kwargs)


def _engine_kwargs_first(fix: str, engine_kwargs: Mapping[str, Any] | None) -> str:
    """`fix`, after the engine's processor kwargs where it was given some: they reach every
    probe, so they are the first suspect."""
    if not engine_kwargs:
        return fix
    return (
        f"The engine's `mm_processor_kwargs` ({dict(engine_kwargs)}) reach every probe: where the "
        f"processor refuses one of them, fix or remove it. Otherwise, {fix[0].lower()}{fix[1:]}"
    )


def routed_to_in_tree(failures: Mapping[str, str], in_tree: str) -> str:
    reasons = "; ".join(f"{m}: {why}" for m, why in failures.items())
    return (
        f"hf_bridge cannot place this checkpoint's multimodal items ({reasons}), so it is served by "
        f"vLLM's in-tree Transformers backend ({in_tree}), exactly as without hf_bridge."
    )


def text_only_prompts_differ(processor: Any) -> str:
    return (
        f"{type(processor).__name__} rewrites the text of a prompt without images, videos or audio "
        "in a way hf_bridge cannot reproduce from the processor's own additions. vLLM does not run "
        "the multimodal processor on such a prompt, so it is run as tokenized and may differ from "
        "transformers there; prompts with media are laid out as the processor lays them out."
    )


def media_sent_to_text_only_engine(modalities: list[str], language_model_only: bool) -> str:
    setting = ("was started with `language_model_only`" if language_model_only
               else "was started with a `limit_mm_per_prompt` of 0 for every modality")
    return (
        f"This request carries {' and '.join(modalities)} input, and this engine serves text alone: it {setting}, "
        "so it encodes no media (vLLM builds no tower for it). Send the prompt without media, or serve media from an engine "
        "started without that setting."
    )


def embeds_without_side_features(modality: str, processor: Any) -> str:
    return (
        f"{modality} embeddings cannot be taken for this model: its vision tower also feeds "
        "intermediate-layer (deepstack) features into the decoder, which an embedding input "
        f"does not carry. Send the {modality} itself."
    )


def prompt_ids_not_text(processor: Any) -> str:
    return (
        f"hf_bridge lays out this model's prompts with its processor, from their text, as "
        f"transformers does ({type(processor).__name__} rewrites the text around each item); "
        f"these prompt token ids do not decode to a text that tokenizes back to them. Send the "
        f"prompt as text, or as ids the tokenizer made from a text."
    )


NATIVE_OR_TRANSFORMERS = ("Serve it with vLLM's native implementation (model_impl=\"vllm\") where vLLM has one for this "
                          "architecture, or check it with transformers itself.")


def text_model_computes_its_own_attention(model_type: str, text_class: str) -> str:
    return (
        f"this {model_type} model's text model, {text_class}, computes its attention itself: it declares no "
        f"attention backend and its attention modules do not call transformers' attention interface, so "
        f"vLLM's paged attention (attn_implementation=\"vllm\") cannot take its place, and its layers would "
        f"keep no KV cache. vLLM's registry refuses such a class when a checkpoint names it; here a tower "
        f"model nests it. {NATIVE_OR_TRANSFORMERS}"
    )


def attention_terms_not_applied(module: Any, terms: list[str]) -> str:
    names = ", ".join(f"`{t}`" for t in terms)
    return (
        f"{type(module).__name__} passes {names} to its attention function, a term of the attention "
        f"scores (a position bias, a mask of its own, the key blocks a sparse indexer chose) that vLLM's paged attention "
        f"does not apply: served by the Transformers backend, this model would not attend as it was "
        f"trained to, and answer wrongly. {NATIVE_OR_TRANSFORMERS}"
    )


def heads_not_as_built(module: Any, name: str, handed: tuple[int, int], held: tuple[int, int]) -> str:
    counted = "`num_attention_heads`" if name == "query" else "`num_key_value_heads`"
    return (
        f"{type(module).__name__} hands its attention function {handed[0]} {name} heads of {handed[1]}, while vLLM's "
        f"attention layer for it was built for {held[0]} of {held[1]} (the text config's {counted} and head size, or "
        f"the module's own `num_heads` and `num_key_value_groups`, per tensor-parallel rank): this decoder computes its "
        f"heads otherwise than either counts them, and vLLM would read them as other tokens' and answer wrongly. "
        f"vLLM's Transformers backend cannot build such a layer. {NATIVE_OR_TRANSFORMERS}"
    )


def module_heads_not_divisible(model_type: str, heads: Mapping[str, int], tp_size: int) -> str:
    counts = ", ".join(f"{name}: {count}" for name, count in heads.items())
    return (
        f"This {model_type} model's attention modules count query heads of their own that {tp_size} tensor-parallel "
        f"ranks cannot share evenly ({counts}). Choose a tensor_parallel_size that divides each count."
    )


def _soft_cap(value: float | None) -> str:
    return "none" if not value else f"{value:g}"


def soft_cap_not_as_applied(module: Any, passed: float | None, applied: float | None) -> str:
    return (
        f"{type(module).__name__} hands its attention function a soft cap of {_soft_cap(passed)}, while vLLM's "
        f"attention layer for it applies {_soft_cap(applied)} (the config's `attn_logit_softcapping`, where hf_bridge "
        f"could not read the soft cap from the module's call): served so, the model would not attend as transformers "
        f"computes it. Set `attn_logit_softcapping` in the checkpoint's text config to {_soft_cap(passed)}."
    )


def soft_caps_differ_by_layer(caps: dict[int, float | None]) -> str:
    layers = ", ".join(f"layer {layer}: {_soft_cap(cap)}" for layer, cap in sorted(caps.items()))
    return (
        f"this model's decoder layers hand their attention functions different soft caps of the scores ({layers}), and "
        f"vLLM builds every layer's attention with the one cap the config names (`attn_logit_softcapping`): served so, "
        f"some layers would not attend as transformers computes them. {NATIVE_OR_TRANSFORMERS}"
    )


def indexed_attention(layers: list[tuple[int, str]], model_type: str) -> str:
    return (
        f"{len(layers)} decoder layer(s) of this {model_type} model attend sparsely (layers {_layer_list(layers)}): "
        f"an indexer picks the keys each query attends to, from keys of its own that transformers caches beside "
        f"the keys and values. vLLM's paged attention attends to every key and keeps no indexer keys: served by "
        f"the Transformers backend, this model would not attend as it was trained to. {NATIVE_OR_TRANSFORMERS}"
    )


def _layer_list(layers: list[tuple[int, str]]) -> str:
    return ", ".join(f"{index} ({kind})" for index, kind in layers[:4]) + (", ..." if len(layers) > 4 else "")


def layers_with_carried_state(layers: list[tuple[int, str]], model_type: str) -> str:
    return (
        f"{len(layers)} decoder layer(s) of this {model_type} model keep a convolution or recurrent state "
        f"from one step to the next (layers {_layer_list(layers)}), which transformers caches beside the keys and "
        f"values. hf_bridge keeps such a state per request where one module of the layer takes "
        f"transformers' cache; in these layers several modules share it, or none takes it, and served "
        f"without their states each step would see only its own tokens. {NATIVE_OR_TRANSFORMERS}"
    )


def carried_state_without_slots(layers: list[tuple[int, str]], model_type: str, class_name: str) -> str:
    return (
        f"{class_name} keeps no per-request state, and {len(layers)} decoder layer(s) of this {model_type} model "
        f"carry one from step to step (layers {_layer_list(layers)}): leave the architecture to hf_bridge, which resolves such a model "
        f"to its `HFBridgeHybrid...` class, or name that class in hf_overrides."
    )


def attention_beside_state_not_found(layers: list[tuple[int, str]], model_type: str) -> str:
    return (
        f"{len(layers)} decoder layer(s) of this {model_type} model attend beside the state they carry (layers "
        f"{_layer_list(layers)}), and no attention module of theirs calls transformers' attention interface with "
        f"their own layer index, where vLLM's attention layer is found (an attention block shared across layers, "
        f"as Zamba2's is, has no index of its own). Served without it, their attention would keep no keys. "
        f"{NATIVE_OR_TRANSFORMERS}"
    )


def state_module_not_run_alone(module: str, exc: Exception) -> str:
    return (
        f"{module} does not run on hidden states and a transformers cache alone ({type(exc).__name__}: {exc}), "
        f"as hf_bridge runs each layer that carries a state: it takes more arguments, or reads a cache class "
        f"of its own. {NATIVE_OR_TRANSFORMERS}"
    )


def carried_state_beside_latent_attention(model_type: str) -> str:
    return (
        f"this {model_type} model's layers that carry a state from step to step sit beside multi-head latent "
        f"attention (MLA), and hf_bridge builds state slots beside vLLM's regular attention layers only. "
        f"{NATIVE_OR_TRANSFORMERS}"
    )


def carried_state_needs_one_tensor_parallel_rank(model_type: str, tensor_size: int) -> str:
    return (
        f"tensor_parallel_size={tensor_size} cannot serve this {model_type} model: its layers that carry a "
        f"state from step to step run as transformers wrote them, on whole weights, and hf_bridge does not "
        f"shard them. Use tensor_parallel_size=1."
    )


def carried_state_without_speculative_decoding(model_type: str) -> str:
    return (
        f"speculative decoding cannot serve this {model_type} model through hf_bridge: its layers that carry a "
        f"state from step to step would advance it over draft tokens before they are accepted, and hf_bridge "
        f"keeps one state per request, not one per draft position. Serve it without a speculative_config."
    )


def carried_states_of_several_layouts(model_type: str, layouts: set) -> str:
    return (
        f"the decoder layers of this {model_type} model that carry a state from step to step keep states "
        f"of {len(layouts)} different shapes ({', '.join(sorted(str([e.shape for e in layout]) for layout in layouts))}); "
        f"vLLM's state slots for hf_bridge hold one shape. {NATIVE_OR_TRANSFORMERS}"
    )


def renamed_architecture_read_as_pooling(architecture: str, loaded_as: str) -> str:
    return (
        f"The checkpoint names its architecture {architecture!r}, a class transformers does not have; "
        f"transformers loads it as {loaded_as}, a generation model, but vLLM reads a name ending in "
        f"'Model' as an embedding model. To generate, pass runner='generate' (`--runner generate`), or "
        f"hf_overrides={{'architectures': ['{loaded_as}']}}."
    )
