"""Parity between vLLM (through hf_bridge) and transformers, token for token.

*Parity* means: identical prompt token ids, identical greedy tokens, log-probs of the
chosen tokens within `ATOL`, and log-probs of every prompt token within `ATOL` of the
HF forward. The reference is computed with the HF model class and processor exactly
as a transformers user would: `processor(text=..., images=..., videos=...)`,
`model.generate`, then one forward over prompt + generation for the log-probs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..length_rope import forget_length, length_rotaries
from ..media_files import audio_samples, read_audio, read_image
from ..probes import (
    DEFAULT_SAMPLING_RATE,
    MODALITIES,
    audio_sampling_rate,
    call_reading_one_videos_metadata,
    needs_video_metadata,
    video_metadata,
    video_metadata_asked,
    without_asked_metadata,
)
from .checkpoint import processor_as_vllm_loads
from .media_in_memory import read_video_file

ATOL = 1e-3
"""Float32 log-prob tolerance: kernels differ (paged vs SDPA attention), the model doesn't."""

MAX_NEW_TOKENS = 8
TOP_K = 5
"""Alternatives kept per generated position, for the lenient rule (vLLM's own tests' k)."""


@dataclass(frozen=True)
class Case:
    """One prompt, defined by plain parameters so it can be rebuilt in another process.

    Its media are the user's files where given (`image_files`, `video_files`,
    `audio_files`), else deterministic: image i is a textured `side`-based image of seed
    i+1, audio clip i a chirp with noise of seed i+1.
    """

    name: str
    side: int = 64
    num_images: int = 0
    num_videos: int = 0
    text: str = "Describe what you see."
    num_audios: int = 0
    image_files: tuple[str, ...] = ()
    video_files: tuple[str, ...] = ()
    media_digest: str = ""
    """Digest of the files' bytes, so a cached reference follows a file that changed."""
    image_shape: tuple[int, ...] = ()
    """(width, height) of every synthetic image, instead of the two `side`-based shapes."""
    processor_kwargs: str = ""
    """Keyword arguments for the HF processor call, as JSON (`mm_processor_kwargs`): given
    to transformers' processor and, per request, to vLLM's."""
    audio_files: tuple[str, ...] = ()
    new_tokens: int = MAX_NEW_TOKENS
    """Greedy tokens both sides generate and the check compares (`--max-tokens`)."""

    def __post_init__(self):
        for name in ("image_files", "video_files", "audio_files", "image_shape"):  # lists, once the case went through JSON
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @classmethod
    def from_files(
        cls, name: str, text: str, images: Sequence[str] = (), videos: Sequence[str] = (), audios: Sequence[str] = ()
    ) -> Case:
        """A case of the user's own image, video and audio files (absolute paths are kept)."""
        import hashlib

        resolved = [tuple(str(Path(p).expanduser().resolve()) for p in files) for files in (images, videos, audios)]
        paths = [p for files in resolved for p in files]
        missing = [p for p in paths if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"no such media file: {', '.join(missing)}")
        digest = hashlib.sha256(b"".join(Path(p).read_bytes() for p in paths)).hexdigest()[:16]
        image_files, video_files, audio_files = resolved
        for read, files in ((read_image, image_files), (read_video_file, video_files), (audio_samples, audio_files)):
            for path in files:  # refused now, not in a worker minutes later
                read(path)
        return cls(
            name, num_images=len(images), num_videos=len(videos), num_audios=len(audios), text=text,
            image_files=image_files, video_files=video_files, audio_files=audio_files, media_digest=digest,
        )

    @property
    def images(self) -> list[Any]:
        if self.image_files:
            return [read_image(path) for path in self.image_files]
        shapes = [self.image_shape] if self.image_shape else [(self.side + self.side // 2, self.side), (self.side, self.side + self.side // 3)]
        return [test_image(*shapes[i % len(shapes)], seed=i + 1) for i in range(self.num_images)]

    @property
    def videos(self) -> list[Any]:
        return [frames for frames, _ in self.videos_with_metadata()]

    def videos_with_metadata(self) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """Each video's frames and its metadata (a file's own frame rate), which processors
        read to sample frames and to time them: both sides get the same."""
        if self.video_files:
            return [read_video_file(path) for path in self.video_files]
        return [(video, video_metadata(len(video))) for video in (test_video(seed=7 + i) for i in range(self.num_videos))]

    def audios(self, sampling_rate: int) -> list[np.ndarray]:
        """The clips, sampled at `sampling_rate` (the feature extractor's: neither side
        resamples them again); the user's files resampled to it once, here."""
        if self.audio_files:
            return [read_audio(path, sampling_rate) for path in self.audio_files]
        return [test_audio(seconds=1.0 + 0.5 * i, seed=i + 1, sampling_rate=sampling_rate) for i in range(self.num_audios)]

    @property
    def media_counts(self) -> dict[str, int]:
        """Items per modality, those the case has, in prompt order."""
        counts = {"image": self.num_images, "video": self.num_videos, "audio": self.num_audios}
        return {m: n for m, n in counts.items() if n}

    @property
    def mm_processor_kwargs(self) -> dict[str, Any]:
        return json.loads(self.processor_kwargs) if self.processor_kwargs else {}

    def messages(self) -> list[dict]:
        content = [{"type": kind} for kind, n in self.media_counts.items() for _ in range(n)]
        content = [dict(c) for c in content] + [{"type": "text", "text": self.text}]
        return [{"role": "user", "content": content}]

    def key(self) -> str:
        fields = dataclasses.asdict(self)
        for name in ("num_audios", "image_files", "video_files", "media_digest", "image_shape", "processor_kwargs", "audio_files"):
            if not fields[name]:  # keys of cases without them read as before they existed
                del fields[name]
        if self.new_tokens == MAX_NEW_TOKENS:
            del fields["new_tokens"]
        return json.dumps(fields, sort_keys=True)


def test_image(width: int, height: int, seed: int):
    """A deterministic, textured RGB image (smooth gradients plus noise)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / max(width - 1, 1), y * 255 / max(height - 1, 1), (x + y) % 256], -1)
    noise = rng.normal(0, 40, (height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def test_video(num_frames: int = 4, width: int = 112, height: int = 112, seed: int = 7) -> np.ndarray:
    frames = [np.asarray(test_image(width, height, seed + i)) for i in range(num_frames)]
    return np.stack(frames)


def test_audio(seconds: float = 1.0, seed: int = 1, sampling_rate: int = DEFAULT_SAMPLING_RATE) -> np.ndarray:
    """A deterministic clip: a rising tone plus noise, float32 at `sampling_rate`."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sampling_rate)) / sampling_rate
    tone = 0.5 * np.sin(2 * np.pi * (200 + 300 * seed) * t * (1 + t))
    return (tone + 0.05 * rng.normal(size=t.shape)).astype(np.float32)


def standard_cases(side: int) -> dict[str, Case]:
    """The cases every zoo model runs: `side` is large enough for >= 2 tiles."""
    return {
        "one_image": Case("one_image", side, num_images=1),
        "two_images": Case("two_images", side, num_images=2, text="Compare the two images."),
        "text_only": Case("text_only", side, text="Tell me about the weather today."),
        "video": Case("video", side, num_videos=1, text="Summarize the video."),
        "audio": Case("audio", side, num_audios=1, text="Transcribe the audio."),
    }


def shape_cases() -> dict[str, Case]:
    """Two image shapes `hf-bridge validate` adds to the standard cases: a 5:1 strip, and a
    1024 x 768 photo, which tiling processors (InternVL, LLaVA-NeXT, Idefics3) tile."""
    return {
        "odd_aspect": Case("odd_aspect", num_images=1, image_shape=(320, 64), text="Read the strip."),
        "large_image": Case("large_image", num_images=1, image_shape=(1024, 768)),
    }


@dataclass
class Result:
    prompt_ids: list[int]
    tokens: list[int]
    token_logprobs: list[float]
    prompt_logprobs: list[float]
    """Log-prob of prompt token i given tokens < i, for i >= 1."""
    top_logprobs: list[list[tuple[int, float]]] = dataclasses.field(default_factory=list)
    """Per generated position, the `TOP_K` likeliest (token, log-prob), likeliest first."""


def prompt_text(processor, case: Case) -> str:
    """The chat template's rendering; without a template, the processor's own tokens
    before the text, as its model card writes prompts (none where the processor
    inserts the items itself, as Fuyu's does)."""
    if getattr(processor, "chat_template", None) is not None:
        return processor.apply_chat_template(case.messages(), add_generation_prompt=True)
    tokens = "".join((getattr(processor, f"{kind}_token", "") or "") * n for kind, n in case.media_counts.items())
    if tokens:
        try:
            _call(processor, tokens + case.text, case)
        except Exception:  # noqa: BLE001 - its own token refused, or the media themselves
            try:
                _call(processor, case.text, case)
            except Exception:  # noqa: BLE001 - the media (Phi-4's clip under one window): named where they are processed
                return tokens + case.text
            return case.text  # the processor refuses its own token: it inserts items itself
    return tokens + case.text


def hf_inputs(processor, case: Case, **extra):
    """The processor called as a transformers user would; media lists flat, else per sample."""
    return _call(processor, prompt_text(processor, case), case, return_tensors="pt", **extra)


def token_types_wanted(model) -> dict[str, bool]:
    """The processor kwarg a user adds where the model's forward takes `mm_token_type_ids`
    (its M-RoPE positions) but the processor does not return them by default (Cosmos3-Edge's
    lists them among its `model_input_names`, yet leaves the kwarg off)."""
    from ..hf_classes import forward_takes

    return {"return_mm_token_type_ids": True} if forward_takes(type(model), "mm_token_type_ids") else {}


def model_inputs(model, processor, case: Case):
    """The case's inputs as `model`'s forward takes them from its processor: with the token
    types it reads (`token_types_wanted`), in its dtype, without training labels (PaliGemma's
    processor adds them)."""
    inputs = for_model(hf_inputs(processor, case, **token_types_wanted(model)), model.dtype)
    inputs.pop("labels", None)
    return inputs


def for_model(inputs, dtype):
    """The processor's output as a model in `dtype` takes it: floating tensors cast where
    the model is not in float32 (not every model casts its pixels), and widened where
    narrower, which is exact (Llama 4's processor gives bfloat16 pixels)."""
    import torch

    if dtype != torch.float32:
        inputs = inputs.to(dtype)  # BatchFeature casts floating tensors only
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype.itemsize < dtype.itemsize:
            inputs[key] = value.to(dtype)
    return inputs


MEDIA_ARGUMENTS = {"image": ("images",), "video": ("videos", "video_metadata"), "audio": ("audio",)}
"""The processor's keyword arguments that carry each modality's items, one entry per item."""


def media_kwargs(processor, case: Case) -> dict[str, list]:
    """The case's items as the processor takes them (`MEDIA_ARGUMENTS`), flat lists."""
    kwargs: dict[str, Any] = {}
    if case.num_images:
        kwargs["images"] = case.images
    if case.num_videos:
        videos = case.videos_with_metadata()
        kwargs["videos"] = [frames for frames, _ in videos]
        kwargs["video_metadata"] = [metadata for _, metadata in videos]
    if case.num_audios:
        kwargs["audio"] = case.audios(audio_sampling_rate(processor))
    return kwargs


def media_limits(cases: Sequence[Case]) -> dict[str, int]:
    """The most items of each modality any one of `cases` holds: the engine's
    `limit_mm_per_prompt` for them."""
    limits: dict[str, int] = {}
    for case in cases:
        for modality, count in case.media_counts.items():
            limits[modality] = max(limits.get(modality, 0), count)
    return limits


def items_alone(processor, case: Case, **extra):
    """Each of the case's items processed alone, in prompt order: (its modality, the
    processor's output for a one-item prompt of that item), as a transformers user
    processes a prompt with that item only."""
    media = media_kwargs(processor, case)
    as_loaded = processor_as_vllm_loads(processor, case.mm_processor_kwargs)
    for modality, count in case.media_counts.items():
        only = {f"num_{m}s": int(m == modality) for m in MEDIA_ARGUMENTS}
        one_item = dataclasses.replace(case, image_files=(), video_files=(), audio_files=(), **only)
        text = prompt_text(processor, one_item)
        for index in range(count):
            item = {key: [media[key][index]] for key in MEDIA_ARGUMENTS[modality] if key in media}
            yield modality, _call_with(as_loaded, text, item, {**case.mm_processor_kwargs, **extra})


def _call(processor, text: str, case: Case, **extra):
    as_loaded = processor_as_vllm_loads(processor, case.mm_processor_kwargs)
    return _call_with(as_loaded, text, media_kwargs(processor, case), {**case.mm_processor_kwargs, **extra})


def _call_with(processor, text: str, media: dict[str, list], extra: dict[str, Any]):
    asked = video_metadata_asked(processor, media, extra)
    try:
        flat = call_reading_one_videos_metadata(lambda given: processor(text=[text], **given, **extra, **asked), media)
        return without_asked_metadata(flat, extra)
    except ValueError:
        if not media:
            raise
        nested = {k: [v] for k, v in media.items()}
        return without_asked_metadata(processor(text=[text], **nested, **extra, **asked), extra)


SOFTCAP_FIELD = "attn_logit_softcapping"
"""A config field asking attention to soft-cap its scores (Gemma 2's text model, as in
PaliGemma 2). transformers' eager attention applies it; its SDPA path, the default, takes
the cap and drops it (`sdpa_attention_forward` swallows `softcap`); vLLM applies it."""


def reference_attention(config) -> dict[str, str]:
    """`from_pretrained` arguments for the attention the reference runs: transformers'
    default, or eager where the model soft-caps attention scores (`SOFTCAP_FIELD`), so that
    the reference computes the model its config describes."""
    if any(getattr(c, SOFTCAP_FIELD, None) for c in (config, config.get_text_config())):
        return {"attn_implementation": "eager"}
    return {}


def load_generation_model(model_dir: str | Path, dtype: str = "float32"):
    """The class a transformers user generates with, in `dtype`: image-text-to-text, else
    the multimodal-LM auto class (audio-language models: GLM-ASR, Qwen3-ASR), else the
    model type's class (`hf_classes.multimodal_generation_class`: Audio Flamingo 3); as
    transformers resolves it, the checkpoint's own class where its code is trusted.

    A whole model that hands text generation to one of its models is that model, which
    its own `generate` runs alone where no audio is asked for (Qwen2.5-Omni's thinker:
    `hf_classes.text_generation_delegate`).

    In float64 (the rounding check's exact reference) experts run transformers' eager
    loop: its grouped-matmul kernels take no double. A model that soft-caps attention
    scores runs eager attention (`reference_attention`)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoModelForMultimodalLM

    from ..hf_classes import multimodal_generation_class, text_generation_delegate
    from .checkpoint import load_config, trusts_remote_code

    config = load_config(model_dir)
    own_code = (getattr(config, "auto_map", None) or {}) if trusts_remote_code() else {}
    if type(config) in AutoModelForImageTextToText._model_mapping or AutoModelForImageTextToText.__name__ in own_code:
        auto = AutoModelForImageTextToText
    elif type(config) in AutoModelForMultimodalLM._model_mapping or own_code:
        auto = AutoModelForMultimodalLM
    else:  # a class transformers lists as sequence-to-sequence only (Audio Flamingo 3)
        auto = multimodal_generation_class(config.model_type) or AutoModelForMultimodalLM
    exact = {"experts_implementation": "eager"} if dtype == "float64" else {}
    model = auto.from_pretrained(model_dir, dtype=getattr(torch, dtype), trust_remote_code=trusts_remote_code(),
                                 **exact, **reference_attention(config)).eval()
    delegate = text_generation_delegate(model.config)
    return model if delegate is None else getattr(model, delegate.attribute)


def prompt_forward(model, inputs):
    """The model's forward over a prompt; where that raises and the model takes
    `mm_encoder_outputs`, the forward as `generate`'s prefill runs it: media encoded
    first, each `get_<modality>_features` given every input it takes (transformers' own
    step, called, not copied). Gemma 4's plain forward drops `num_frames_per_video`, so it
    raised on every video its `generate` runs. Only then: that step also takes away
    inputs a forward still reads (Qwen2-VL's `image_grid_thw`, for its M-RoPE positions),
    and its prompt log-probs were 2.8 apart. Where both raise, the plain forward's error."""
    try:
        return model(**inputs)
    except Exception as plain:  # noqa: BLE001 - transformers' own code, whatever it raises
        prepare = getattr(model, "_maybe_prepare_encoder_kwargs_for_generation", None)
        if prepare is None or model.config.is_encoder_decoder or not model._supports_mm_encoder_outputs():
            raise
        try:
            return model(**prepare(inputs.get("input_ids"), dict(inputs), "input_ids", model.generation_config))
        except Exception:  # noqa: BLE001 - the plain forward's failure is the one to report
            raise plain from None


def hf_reference(model_dir: str | Path, case: Case | None, *, model=None, processor=None, inputs=None) -> Result:
    """Greedy generation and log-probs from transformers itself, in the model's dtype
    (float32; float64 for the rounding check, bfloat16 for an engine in bfloat16; media
    features cast to it). `inputs`: the forward's own, instead of the processor's for
    `case` (a prompt's ids where the processor refuses text alone, as PaliGemma's does; or
    its ids beside the `inputs_embeds` to run them as, where transformers cannot build
    those from the media itself)."""
    import torch

    from .checkpoint import load_processor

    model = model or load_generation_model(model_dir)
    if inputs is None:
        inputs = model_inputs(model, processor or load_processor(model_dir), case)
    prompt_len = inputs["input_ids"].shape[1]
    new_tokens = case.new_tokens if case is not None else MAX_NEW_TOKENS
    rotaries = length_rotaries(model)  # a dynamic RoPE keeps the last length it saw: each call as a fresh model makes it
    with torch.no_grad():
        for rotary in rotaries:
            forget_length(rotary)
        # generated log-probs are generate's own logits: a second forward would have to
        # guess how each model extends its token types past the prompt
        out = model.generate(
            **inputs, max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens,
            output_logits=True, return_dict_in_generate=True,
        )
        forward_inputs = {k: v for k, v in inputs.items() if k != "input_ids"} if "inputs_embeds" in inputs else inputs
        for rotary in rotaries:
            forget_length(rotary)
        prompt_logits = prompt_forward(model, forward_inputs).logits[0].float()
    ids = out.sequences[0].tolist()
    tokens = ids[prompt_len:]
    steps = [torch.log_softmax(step[0].float(), -1) for step in out.logits]
    token_logprobs = [step[t].item() for step, t in zip(steps, tokens)]
    top = [list(zip(*(x.tolist() for x in reversed(step.topk(TOP_K))))) for step in steps]
    prompt_lps = torch.log_softmax(prompt_logits, -1)
    return Result(
        prompt_ids=ids[:prompt_len],
        tokens=tokens,
        token_logprobs=token_logprobs,
        prompt_logprobs=[prompt_lps[i - 1, ids[i]].item() for i in range(1, prompt_len)],
        top_logprobs=top,
    )


def vllm_request(processor, case: Case) -> dict:
    request: dict[str, Any] = {"prompt": prompt_text(processor, case)}
    mm: dict[str, Any] = {}
    if case.num_images:
        mm["image"] = case.images if case.num_images > 1 else case.images[0]
    if case.num_videos:
        sampled = needs_video_metadata(processor, case.mm_processor_kwargs)
        videos = [(frames, {**metadata, "do_sample_frames": sampled}) for frames, metadata in case.videos_with_metadata()]
        mm["video"] = videos if case.num_videos > 1 else videos[0]
    if case.num_audios:
        rate = audio_sampling_rate(processor)
        audios = [(a, rate) for a in case.audios(rate)]
        mm["audio"] = audios if case.num_audios > 1 else audios[0]
    if mm:
        request["multi_modal_data"] = mm
    if case.processor_kwargs:
        request["mm_processor_kwargs"] = case.mm_processor_kwargs
    return request


def sampling_params(new_tokens: int = MAX_NEW_TOKENS):
    from vllm import SamplingParams

    return SamplingParams(max_tokens=new_tokens, min_tokens=new_tokens, temperature=0.0, logprobs=TOP_K, prompt_logprobs=0)


def vllm_result(llm, processor, case: Case, dtype: str = "float32") -> Result:
    """`case` through `llm`, which must compute in `dtype` as the reference does."""
    require_dtype(llm, dtype)
    (out,) = llm.generate([vllm_request(processor, case)], sampling_params(case.new_tokens), use_tqdm=False)
    return result_from_output(out)


def require_dtype(llm, dtype: str = "float32") -> None:
    """Refuse an engine in another dtype than the reference's: vLLM casts a float32
    checkpoint to bfloat16 by default, and log-probs 1e-3 apart would then report a false
    failure."""
    import torch

    runs_in = llm.llm_engine.model_config.dtype
    if runs_in != getattr(torch, dtype):
        check = "parity" if dtype == "float32" else "the check"
        raise ValueError(
            f"{check} needs the engine in {dtype} (the reference's dtype), but it runs in {runs_in}: "
            f'build it with LLM(..., dtype="{dtype}"), or with hf_bridge.validate.engine.make_llm(..., dtype="{dtype}").'
        )


def result_from_output(out) -> Result:
    completion = out.outputs[0]
    tokens = list(completion.token_ids)
    token_lps = [lp[t].logprob for t, lp in zip(tokens, completion.logprobs)]
    prompt = list(out.prompt_token_ids)
    prompt_lps = [lp[t].logprob for t, lp in zip(prompt[1:], out.prompt_logprobs[1:])]
    top = [sorted(((t, p.logprob) for t, p in lp.items() if p.rank <= TOP_K), key=lambda pair: -pair[1]) for lp in completion.logprobs]
    return Result(prompt, tokens, token_lps, prompt_lps, top)


def compare(reference: Result, candidate: Result, atol: float = ATOL) -> list[str]:
    """Every way `candidate` departs from `reference`; empty means parity."""
    problems = []
    if reference.prompt_ids != candidate.prompt_ids:
        problems.append(
            f"prompt ids differ: {len(reference.prompt_ids)} vs {len(candidate.prompt_ids)} tokens; "
            f"first difference at {_first_difference(reference.prompt_ids, candidate.prompt_ids)}"
        )
        return problems
    if reference.tokens != candidate.tokens:
        first = _first_difference(reference.tokens, candidate.tokens)
        problems.append(f"greedy tokens differ from generated position {first}: {reference.tokens} vs {candidate.tokens}")
    # prompt log-prob i is that of prompt token i + 1
    for label, ref, cand, offset in (
        ("generated", reference.token_logprobs, candidate.token_logprobs, 0),
        ("prompt", reference.prompt_logprobs, candidate.prompt_logprobs, 1),
    ):
        n = min(len(ref), len(cand))
        worst = max((abs(r - c) for r, c in zip(ref[:n], cand[:n])), default=0.0)
        if len(ref) != len(cand) or not worst <= atol or any(math.isnan(c) for c in cand):
            beyond = next((i for i, (r, c) in enumerate(zip(ref[:n], cand[:n])) if not abs(r - c) <= atol), None)
            where = f"; first beyond it at {label} position {beyond + offset}" if beyond is not None else ""
            problems.append(f"{label} log-probs differ by up to {worst:.2e} (tolerance {atol:.0e}){where}")
    return problems


ROUNDING_SHARE = 0.25
"""The most of `ATOL` the float32 reference's own rounding may take on a checkpoint that
tests parity: beyond it, a correct float32 implementation rounding the other way can land
outside the tolerance (found on a tiny Aria: 8.3e-4 at one prompt position)."""
ROUNDING_BUDGET = ROUNDING_SHARE * ATOL


def rounding_error(result: Result, exact: Result, who: str = "float32's") -> tuple[float, str]:
    """How far a float32 `result` (transformers' by default; `who` names it) is from the
    `exact` (float64) one: the largest log-prob difference, and where. Different prompt
    ids or greedy tokens count as infinite."""
    if result.prompt_ids != exact.prompt_ids or result.tokens != exact.tokens:
        return math.inf, f"float64 chose other tokens: {exact.tokens} against {who} {result.tokens}"
    where = [(abs(r - e), f"generated position {i}") for i, (r, e) in enumerate(zip(result.token_logprobs, exact.token_logprobs))]
    where += [(abs(r - e), f"prompt position {i + 1}") for i, (r, e) in enumerate(zip(result.prompt_logprobs, exact.prompt_logprobs))]
    return max(where, default=(0.0, "nowhere"))


def rounding_problem(reference: Result, exact: Result) -> str:
    """Why the float32 `reference` cannot test parity ("" when it can): its own rounding,
    against the `exact` (float64) result, takes more than `ROUNDING_SHARE` of `ATOL`."""
    error, where = rounding_error(reference, exact)
    if error <= ROUNDING_BUDGET:
        return ""
    return (
        f"ill-conditioned checkpoint: transformers' float32 result is {error:.2e} from its float64 one at {where}, "
        f"over the {ROUNDING_BUDGET:.1e} rounding budget ({ROUNDING_SHARE:.0%} of the {ATOL:.0e} tolerance)"
    )


def compare_lenient(reference: Result, candidate: Result) -> tuple[list[str], str]:
    """vLLM's own tests' rule (`check_logprobs_close`): identical prompt ids, and where the
    greedy tokens first differ, each side's token must be among the other's `TOP_K`; the
    sequences are not compared past it. Returns (problems, what was found: the near-tie,
    if any, and the largest log-prob difference before it)."""
    if reference.prompt_ids != candidate.prompt_ids:
        return compare(reference, candidate)[:1], ""
    problems, found = _top_k_rule(reference, candidate)
    found.append(f"max |log-prob difference| {logprob_distance(reference, candidate):.2e} where compared (the strict rule's tolerance: {ATOL:.0e})")
    return problems, "; ".join(found)


def _top_k_rule(reference: Result, candidate: Result) -> tuple[list[str], list[str]]:
    """Where the greedy tokens first differ, each side's token must be in the other's top
    `TOP_K`: (problems, the near-tie found)."""
    i = _first_difference(reference.tokens, candidate.tokens)
    if i == min(len(reference.tokens), len(candidate.tokens)):
        return [], []
    r, c = reference.tokens[i], candidate.tokens[i]
    in_candidate = r in {t for t, _ in candidate.top_logprobs[i]}
    in_reference = c in {t for t, _ in reference.top_logprobs[i]}
    where = f"generated position {i}: transformers chose {r} ({reference.token_logprobs[i]:.3f}), vLLM {c} ({candidate.token_logprobs[i]:.3f})"
    if in_candidate and in_reference:
        return [], [f"near-tie at {where}, each in the other's top {TOP_K}; not compared past it"]
    return [f"tokens differ at {where}, not each in the other's top {TOP_K}"], []


def logprob_distance(a: Result, b: Result) -> float:
    """The largest log-prob difference of two results of one prompt: every prompt position,
    and the generated positions before their greedy tokens first differ (past it, each is
    the log-prob of another continuation)."""
    agreed = _first_difference(a.tokens, b.tokens)
    pairs = zip(a.token_logprobs[:agreed] + a.prompt_logprobs, b.token_logprobs[:agreed] + b.prompt_logprobs)
    return max((abs(x - y) for x, y in pairs), default=0.0)


BFLOAT16_ROUNDING_FACTOR = 3.0
"""In bfloat16, vLLM's log-probs may be at most this many times as far from transformers'
in bfloat16 as transformers' bfloat16 result is from its own float32 one (the reference's
own rounding, which sets the scale): where an engine whose own bfloat16 rounding is up to
twice transformers' can land (triangle inequality). Measured through hf_bridge on the zoo
(`hf-bridge validate --dtype bfloat16`, 90 cases of 17 architectures): median 0.40 of that
rounding, at most 2.12 (Qwen3-VL-MoE's video). The in-tree backend's Aya Vision, which
applies a `logit_scale` transformers never applies, keeps every greedy token and lands 40
to 125 times as far: the top-5 rule alone passes it."""
BFLOAT16_FLOOR = 1e-2
"""The least rounding scale a bfloat16 check allows (bfloat16 keeps 8 bits: 2**-7 relative)."""


def compare_bfloat16(reference: Result, reference_float32: Result, candidate: Result) -> tuple[list[str], str]:
    """An engine in bfloat16 against transformers in bfloat16 (`reference`): the tokens by
    vLLM's own tests' rule (`compare_lenient`), and the log-probs within
    `BFLOAT16_ROUNDING_FACTOR` times the reference's own rounding, its distance from
    transformers' float32 result (`reference_float32`). Returns (problems, what was found)."""
    if reference.prompt_ids != candidate.prompt_ids:
        return compare(reference, candidate)[:1], ""
    problems, found = _top_k_rule(reference, candidate)
    distance, rounding = logprob_distance(reference, candidate), logprob_distance(reference, reference_float32)
    tolerance = BFLOAT16_ROUNDING_FACTOR * max(rounding, BFLOAT16_FLOOR)
    scale = (f"tolerance {tolerance:.2e}, {BFLOAT16_ROUNDING_FACTOR:g} x the reference's own rounding: transformers' "
             f"bfloat16 log-probs are {rounding:.2e} from its float32 ones")
    if not distance <= tolerance:
        problems.append(f"log-probs differ by up to {distance:.2e} where compared ({scale})")
    else:
        found.append(f"max |log-prob difference| {distance:.2e} where compared ({scale})")
    return problems, "; ".join(found)


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def is_degenerate(tokens: list[int]) -> bool:
    """A continuation with fewer than 3 distinct tokens in 8 proves little."""
    return len(set(tokens[:8])) < 3


def generated_placeholders(tokens: list[int], processor: Any) -> list[int]:
    """Where generated `tokens` hold one of the processor's media placeholders
    (`<modality>_token`). vLLM marks media by position: a generated placeholder is embedded
    as the plain token (by every implementation, native ones too), while transformers'
    forward marks media by id (Gemma 4 embeds such a token as the pad token). A random
    checkpoint that writes one tests that difference, not parity; trained ones do not."""
    tokenizer = getattr(processor, "tokenizer", processor)
    names = [getattr(processor, f"{modality}_token", None) for modality in MODALITIES]
    ids = {tokenizer.convert_tokens_to_ids(name) for name in names if isinstance(name, str) and name}
    return [i for i, token in enumerate(tokens) if token in ids]


def placeholder_diagnosis(reference: Result, processor: Any) -> str:
    """Why a continuation may differ after transformers wrote a media placeholder ("" where it wrote none)."""
    written = generated_placeholders(reference.tokens, processor)
    if not written:
        return ""
    return (f"transformers generated a media placeholder at position {written[0]}, which its forward then marks as "
            "media by id, while vLLM marks media by position (`parity.generated_placeholders`)")
