"""A tiny byte-level BPE tokenizer, trained offline on a fixed corpus.

Real checkpoints ship tokenizers trained on the web; the zoo only needs one that is
deterministic, small (so the embedding table stays tiny) and that knows every special
token a processor looks up by name.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

_CORPUS = """
A photo of a cat sitting on a red sofa next to a window. The dog runs across the green field.
Describe the image in detail. What is shown in this picture? How many objects are there?
The weather today is sunny with a light breeze, and the children play in the park.
Compare the two images and tell me what changed between them. Summarize the video.
Numbers: one two three four five six seven eight nine ten. Colours: red green blue yellow.
Vision language models read pictures and text together and answer questions about them.
The quick brown fox jumps over the lazy dog. A man rides a bicycle down a busy street.
User: hello! Assistant: hi, how can I help you today? System: you are a helpful assistant.
""".strip()

VOCAB_SIZE = 480
"""Trained vocabulary size, before special tokens; small keeps the embedding tiny."""


def build_tokenizer(
    special_tokens: list[str],
    *,
    bos: str = "<s>",
    eos: str = "</s>",
    pad: str = "<pad>",
    unk: str = "<unk>",
    add_bos: bool = True,
    chat_template: str | None = None,
    extra_attributes: dict[str, str] | None = None,
    pieces: list[str] | None = None,
) -> PreTrainedTokenizerFast:
    """Train the tiny BPE and wrap it as a `PreTrainedTokenizerFast`.

    `special_tokens` are the multimodal markers the processor expects (`<image>`,
    `[IMG_BREAK]`, ...): they are added as single, never-split tokens.

    `pieces` asks for a SentencePiece-style tokenizer instead (`_sentencepiece_like`).
    """
    core = [unk, bos, eos, pad]
    if pieces is not None:
        tok = _sentencepiece_like(core, pieces, unk)
        add_bos = False
    else:
        tok = _byte_level_bpe(core, unk)
    if add_bos:
        from tokenizers.processors import TemplateProcessing

        bos_id = tok.token_to_id(bos)
        tok.post_processor = TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        unk_token=unk,
        extra_special_tokens=dict(extra_attributes or {}),
    )
    new = [t for t in dict.fromkeys(special_tokens) if t not in fast.get_vocab()]
    fast.add_special_tokens({"additional_special_tokens": new})
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def _byte_level_bpe(core: list[str], unk: str) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=core,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    return tok


def _sentencepiece_like(core: list[str], pieces: list[str], unk: str) -> Tokenizer:
    """A Unigram model behind SentencePiece's normalizer (a "▁" before the text, "▁" for
    spaces), with `pieces` as plain vocabulary entries rather than added tokens.

    That is how Fuyu's tokenizer behaves, and its processor depends on it: a run of
    image tokens tokenizes with a leading "▁", which the processor strips off.

    The vocabulary is the byte-level BPE's (deterministic; the Unigram trainer is not),
    spaces spelled "▁"; every piece costs the same, so text splits into the fewest.
    """
    bpe = _byte_level_bpe(core, unk)
    words = sorted(t.replace("Ġ", "▁") for t in bpe.get_vocab() if t not in core)
    words = [w for w in words if w.isprintable() and w.isascii() or set(w) <= set("▁abcdefghijklmnopqrstuvwxyz")]
    chars = sorted({c for w in words for c in w} | set("▁"))
    vocab = [(t, 0.0) for t in core] + [(c, -2.0) for c in chars]
    vocab += [(w, -1.0) for w in words if len(w) > 1] + [(p, 0.0) for p in pieces]
    tok = Tokenizer(models.Unigram(vocab, unk_id=core.index(unk)))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(core)
    return tok
