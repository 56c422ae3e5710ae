"""Shared fixtures: the tiny zoo and in-process vLLM engines reused across tests.

Engines run in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): they start in seconds and
real exceptions surface in the test. Tests that need vLLM's default multiprocess engine
(bad input, tensor parallel, serving) start it in a subprocess of their own.

The suite runs in two workers (pytest-xdist, `-n 2 --dist loadfile`: a file's tests in
one process, in order). What they share on disk is written under a file lock: the zoo's
checkpoints (`zoo.build`) and the references cached beside them (`validate.reference`).
"""

from __future__ import annotations

import gc
import os
import sys
import weakref

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    # each worker its share of the cores: an in-process engine binds no threads (vLLM's
    # CPU worker process binds them), and two workers' OpenMP pools of every core each
    # would oversubscribe the cores (measured: a file beside another ran 13% longer)
    cores_each = len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores_each)))
    # the suite's test workers (`-n 2`) run side by side: each keeps its own vLLM compile
    # cache and transformers' copies of checkpoint code, which two writers would race on
    for variable, default in (("VLLM_CACHE_ROOT", "~/.cache/vllm"), ("HF_MODULES_CACHE", "~/.cache/huggingface/modules")):
        os.environ[variable] = os.path.join(os.path.expanduser(os.environ.get(variable, default)), f"pytest-{worker}")

import pytest

from hf_bridge.clean_interpreter import CleanCall
from hf_bridge.zoo import build


@pytest.fixture(scope="session")
def zoo():
    """`zoo(name)` -> path of the tiny checkpoint, built once and cached."""
    return build


class GenericCheckpoints:
    """Types outside the zoo, built by the sweep's generic shrinker from transformers'
    default config and processor classes, in a clean interpreter (an engine decorates HF
    classes in place: `clean_interpreter.py`), once per session."""

    def __init__(self, root):
        self.root = root
        self.built: dict[tuple[str, int], object] = {}

    def __call__(self, model_type: str, seed: int = 0):
        return self.build({model_type: seed})[model_type]

    def build(self, seeds: dict[str, int]) -> dict:
        """{type: checkpoint} for each type, built with its seed; the missing ones in one interpreter."""
        from helpers.sweep_checkpoints import build_each

        missing = [(t, self.root / f"{t}-s{s}", s) for t, s in seeds.items() if (t, s) not in self.built]
        if missing:
            CleanCall(build_each, missing, doing=f"building {len(missing)} sweep checkpoint(s)").result()
            self.built.update({(t, s): out for t, out, s in missing})
        return {t: self.built[(t, s)] for t, s in seeds.items()}


class BackboneCheckpoints:
    """The zoo's LLaVA over other decoders (`hf_bridge/zoo/backbones.py`), built in a
    clean interpreter (an engine decorates HF classes in place), once per session."""

    def __init__(self, root):
        self.root = root
        self.built: dict[str, object] = {}

    def __call__(self, text_type: str, **settings):
        """The LLaVA over `text_type`, its text config given `settings` beside its `BACKBONE_SETTINGS`."""
        from hf_bridge.zoo.backbones import build_backbone_model

        key = text_type + "".join(f"-{name}-{value}" for name, value in sorted(settings.items()))
        if key not in self.built:
            out = self.root / key
            CleanCall(build_backbone_model, text_type, out, 0, settings or None, doing=f"building the LLaVA over {text_type}").result()
            self.built[key] = out
        return self.built[key]


@pytest.fixture(scope="session")
def backbones(tmp_path_factory):
    """`backbones(text_type)` -> the zoo's LLaVA over that decoder (`BackboneCheckpoints`)."""
    return BackboneCheckpoints(tmp_path_factory.mktemp("backbones"))


@pytest.fixture(scope="session")
def generic(tmp_path_factory):
    """`generic(model_type, seed=0)` -> a checkpoint of a type outside the zoo (`GenericCheckpoints`)."""
    return GenericCheckpoints(tmp_path_factory.mktemp("generic"))


@pytest.fixture(scope="session")
def gemma4_variant(tmp_path_factory):
    """`gemma4_variant(name)` -> the tiny Gemma 4 in one of the forms of
    `helpers/gemma4_variant.py`, built in a clean interpreter once per session."""
    from helpers import gemma4_variant

    built = {}

    def variant(name: str):
        if name not in built:
            out = tmp_path_factory.mktemp(f"gemma4_{name}") / f"gemma4_{name}"
            CleanCall(gemma4_variant.main, name, out, doing=f"building the Gemma 4 variant {name}").result()
            built[name] = out
        return built[name]

    return variant


class Engines:
    """One live in-process engine at a time, rebuilt only when its settings change."""

    def __init__(self):
        self.key = None
        self.llm = None

    def get(self, model_dir, **kwargs):
        from hf_bridge.validate.engine import make_llm

        key = (str(model_dir), repr(sorted(kwargs.items())))
        if key != self.key:
            self.close()
            self.llm = make_llm(model_dir, **kwargs)
            self.key = key
        return self.llm

    def close(self):
        from hf_bridge.validate.engine import shutdown

        if self.llm is not None:
            shutdown(self.llm)
        self.llm = None
        self.key = None
        gc.collect()


@pytest.fixture(scope="session")
def engines():
    cache = Engines()
    yield cache
    cache.close()


@pytest.fixture
def hf_bridge_log(caplog, monkeypatch):
    """`caplog` receiving hf_bridge's records at INFO. They go to vLLM's "vllm" logger, which
    does not propagate to the root logger `caplog` listens on, and whose configuration at
    engine start resets any handler or level set on its children; so the records are
    taken at the logger's own `handle`, and vLLM is asked for INFO."""
    import logging

    from hf_bridge import LOGGER_NAME

    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    logger = logging.getLogger(LOGGER_NAME)
    handle = logger.handle

    def also_captured(record):
        caplog.handler.handle(record)
        handle(record)

    # weak: a record's id is reused once it is freed (`caplog.clear()` frees them), and a
    # new record at a freed one's address was dropped as a second sighting
    seen = weakref.WeakSet()

    def once(record) -> bool:  # where vLLM's logger propagates, a record reaches caplog twice
        if record in seen:
            return False
        seen.add(record)
        return True

    monkeypatch.setattr(logger, "handle", also_captured)
    caplog.handler.addFilter(once)
    try:
        yield caplog
    finally:
        caplog.handler.removeFilter(once)


@pytest.fixture
def in_tree_backend_undone(engines, monkeypatch):
    """For a test that runs vLLM's in-tree Transformers backend in this process. Its compile
    decorator changes the HF classes it is given in place (`compile_twin.py`): a plain HF
    model built later in this worker fails ("Current vLLM config is not set"). Each class
    is recorded as it stood before it was decorated; after the test its engine is closed,
    the Dynamo bytecode hooks of the class's instances are removed (each calls the
    decorated class's methods), and the class is put back."""
    from vllm.model_executor.models.transformers.base import Base

    as_before: dict[type, tuple[tuple, dict]] = {}
    decorate = Base._decorate_cls_for_torch_compile

    def recorded_then_decorated(self, cls, *args, **kwargs):
        as_before.setdefault(cls, (cls.__bases__, dict(cls.__dict__)))
        return decorate(self, cls, *args, **kwargs)

    monkeypatch.setattr(Base, "_decorate_cls_for_torch_compile", recorded_then_decorated)
    yield
    engines.close()
    from torch._dynamo import convert_frame

    for hook in list(convert_frame._bytecode_hooks.values()):  # an engine's, and its probes' (meta-device copies)
        if isinstance(owner := getattr(hook, "__self__", None), tuple(as_before)):
            owner.cleanup()  # vLLM's removal of its hook, which needs the class as decorated
    for cls, (bases, namespace) in as_before.items():
        cls.__bases__ = bases
        for name in set(cls.__dict__) - set(namespace):
            delattr(cls, name)
        for name, value in namespace.items():
            if cls.__dict__.get(name) is not value:
                setattr(cls, name, value)


@pytest.fixture(autouse=True)
def hf_classes_left_undecorated():
    """Fails the test that leaves a transformers class decorated in place by vLLM's compile
    decorator (an in-tree engine in this process), rather than whichever later test of the
    worker builds that plain HF model: the order of files in a worker changes from run to run."""
    yield
    wrapper = getattr(sys.modules.get("vllm.compilation.wrapper"), "TorchCompileWithNoGuardsWrapper", None)
    if wrapper is None:
        return
    decorated = sorted(  # hf_bridge's twins share their class's module and name, but are not in it
        f"{cls.__module__}.{cls.__qualname__}" for cls in wrapper.__subclasses__()
        if cls.__module__.startswith("transformers.") and getattr(sys.modules.get(cls.__module__), cls.__name__, None) is cls)
    assert not decorated, (f"this test left {decorated} decorated by vLLM's in-tree backend, which breaks every "
                           "later plain HF model of the class in this worker: request `in_tree_backend_undone`")
    hooks = getattr(sys.modules.get("torch._dynamo.convert_frame"), "_bytecode_hooks", {})
    stale = sorted({type(hook.__self__).__qualname__ for hook in hooks.values()  # vLLM's, of a class put back
                    if getattr(hook, "__func__", None) is wrapper.bytecode_hook and not isinstance(hook.__self__, wrapper)})
    assert not stale, (f"this test left Dynamo bytecode hooks of {stale} modules whose class was put back after "
                       "vLLM's compile decorator changed it: every later compile in this worker fails (\"has no "
                       "attribute 'original_code_object'\"); `in_tree_backend_undone` removes them before it puts a class back")
