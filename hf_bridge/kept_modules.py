"""HF modules kept out of vLLM's layer replacement, which would break them (no vLLM import).

vLLM's Transformers backend swaps every `nn.Linear` for one of its parallel linear
layers, every `experts` module for its fused-MoE layer, and every module shaped like an
RMS norm for its RMSNorm. Each swap assumes what the module does from its type or its
shape: a linear map, experts called with the routing (`experts(hidden_states,
top_k_index, top_k_weights)`), a norm over the last axis. Modules that do something else
under that type stay as transformers wrote them; their weights load as plain parameters,
whole on every tensor-parallel rank.
"""

from __future__ import annotations

import ast
import inspect
import re
from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

from .hf_classes import method_tree

Site = tuple[torch.nn.Module, str, torch.nn.Module]
"""(parent, attribute name, module)."""

EXPERTS_NAME = "experts"
"""The child name vLLM's `MoEMixin` replaces with its fused-MoE layer."""
ROUTING_ARGUMENTS = 3
"""What vLLM's fused-MoE layer is called with in an HF block: hidden states, top-k ids, top-k weights."""
ACTIVATION_NAME = "act_fn"
"""Where transformers' experts keep the activation of their gated MLP."""
GATE_HOOK = "_apply_gate"
"""The method transformers' experts implementations (`use_experts_implementation`) gate
through; a class that defines its own gates otherwise than `act_fn(gate) * up`."""
ACTIVATION_PROBE = torch.linspace(-4.0, 4.0, 17)
"""Points an activation is measured at to tell whether it is SiLU."""

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


class _Opaque(torch.nn.Module):
    """Holds a module out of sight of `named_children` while layers are replaced."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.__dict__["held"] = module


@contextmanager
def kept_out(sites: Iterable[Site]) -> Iterator[None]:
    """The modules at `sites` hidden while the body runs, then put back untouched."""
    sites = list(sites)
    for parent, name, module in sites:
        setattr(parent, name, _Opaque(module))
    try:
        yield
    finally:
        for parent, name, module in sites:
            setattr(parent, name, module)


def torch_composites(root: torch.nn.Module) -> Iterator[Site]:
    """torch.nn built-ins that own linear layers and read their weights directly instead
    of calling them (`nn.MultiheadAttention` reads `out_proj.weight`: SigLIP's pooling head)."""
    for parent in root.modules():
        for name, child in parent.named_children():
            is_builtin = type(child).__module__.startswith("torch.nn.modules")
            owns_linear = any(isinstance(m, torch.nn.Linear) for m in child.modules() if m is not child)
            if is_builtin and owns_linear and not isinstance(child, _CONTAINERS):
                yield parent, name, child


def linears_with_own_forward(root: torch.nn.Module, sharded: Iterable[str] = ()) -> Iterator[Site]:
    """`nn.Linear` subclasses whose forward is more than the linear map (Llama 4's router
    picks its top-k experts and scores them), outside the tensor-parallel plan's patterns
    `sharded` (matched by vLLM on the qualified name): a vLLM linear layer keeps the
    weights and drops the forward."""
    patterns = [re.compile(p) for p in sharded]
    for qualified, parent in root.named_modules():
        for name, child in parent.named_children():
            own_forward = isinstance(child, torch.nn.Linear) and type(child).forward is not torch.nn.Linear.forward
            path = f"{qualified}.{name}" if qualified else name
            if own_forward and not any(p.match(path) for p in patterns):
                yield parent, name, child


def children_beside(root: torch.nn.Module, kept_in: Iterable[torch.nn.Module], names_kept_in: Iterable[str | None] = ()) -> Iterator[Site]:
    """`root`'s children that hold parameters, other than `kept_in` and those named in
    `names_kept_in`: a VLM's towers and projectors beside its text model."""
    kept_in, names_kept_in = [id(m) for m in kept_in], set(names_kept_in)
    for name, child in root.named_children():
        if id(child) not in kept_in and name not in names_kept_in and next(child.parameters(), None) is not None:
            yield root, name, child


def planned_children(root: torch.nn.Module, plan: Iterable[str]) -> list[torch.nn.Module]:
    """`root`'s children holding a module the tensor-parallel `plan` names (its patterns,
    matched on qualified names as vLLM matches them): a flat model's decoder layers, which
    sit beside its towers (Phi-4-multimodal's `layers` beside `embed_tokens_extend`)."""
    patterns = [re.compile(p) for p in plan]
    return [child for name, child in root.named_children()
            if any(p.match(f"{name}.{sub}" if sub else name) for sub, _ in child.named_modules() for p in patterns)]


UNIT_STATISTICS = frozenset({"mean", "std", "var", "std_mean", "var_mean", "sum", "amax", "amin", "topk", "sort",
                             "quantile", "logsumexp", "norm"})
"""Calls that take statistics over a tensor's units, which a rank holding a shard of them
takes over its shard alone."""


def statistics_over_sharded_units(root: torch.nn.Module, plan: dict[str, str]) -> Iterator[Site]:
    """Under tensor parallelism, modules with a linear child the `plan` shards column-wise
    whose forward (and the methods of its own it calls) takes statistics (`UNIT_STATISTICS`),
    as over the units that child gives: each rank would take them over its shard alone
    (Gemma 3n's MLP cuts its gate's activations at their mean plus a multiple of their
    standard deviation). Kept whole on every rank, they take them over all units."""
    colwise = [re.compile(pattern) for pattern, style in plan.items() if style == "colwise"]
    takes_statistics: dict[type, bool] = {}
    for qualified, parent in root.named_modules():
        for name, child in parent.named_children():
            path = f"{qualified}.{name}" if qualified else name
            if not any(isinstance(linear, torch.nn.Linear) and any(p.match(f"{path}.{linear_name}") for p in colwise)
                       for linear_name, linear in child.named_children()):
                continue
            if type(child) not in takes_statistics:
                takes_statistics[type(child)] = any(
                    isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in UNIT_STATISTICS
                    for tree in _forward_trees(type(child)) for node in ast.walk(tree))
            if takes_statistics[type(child)]:
                yield parent, name, child


WEIGHT_NAMES = frozenset({"weight", "bias"})
"""A linear layer's tensors, which vLLM's layer holds otherwise than `nn.Linear`: on the
CPU it packs the weight for its kernel and leaves an empty tensor as `weight`."""
METADATA_READS = frozenset({"dtype", "device"})
"""What code may read of a weight that vLLM's emptied tensor still answers."""


def linears_read_directly(root: torch.nn.Module) -> Iterator[Site]:
    """`nn.Linear` layers whose tensors a module's forward reads instead of calling the layer
    (Jamba's Mamba mixer computes `self.dt_proj.weight @ time_step`). On the CPU vLLM's linear
    layer leaves an empty `weight`, and the mixer raised `size mismatch, got input (2), mat
    (2x4), vec (0)`. Kept whatever the tensor-parallel plan says: read whole, a weight
    sharded would be wrong too. Read from the code each class's forward reaches through
    its own methods, once per class; reads of a weight's dtype or device, or `isinstance`
    checks, do not count."""
    read: dict[type, frozenset[tuple[str, ...]]] = {}
    seen: set[int] = set()
    for module in root.modules():
        if type(module) not in read:
            read[type(module)] = _tensor_reads(type(module))
        for path in read[type(module)]:
            parent = module
            for name in path[:-1]:
                parent = parent._modules.get(name) if isinstance(parent, torch.nn.Module) else None
            child = parent._modules.get(path[-1]) if isinstance(parent, torch.nn.Module) else None
            if isinstance(child, torch.nn.Linear) and id(child) not in seen:
                seen.add(id(child))
                yield parent, path[-1], child


def _tensor_reads(cls: type) -> frozenset[tuple[str, ...]]:
    """The `self.<path>` whose `weight` or `bias` the methods `cls.forward` reaches read."""
    paths: set[tuple[str, ...]] = set()
    for tree in _forward_trees(cls):
        for node in ast.walk(tree):
            path = _self_path(node)
            if path and len(path) > 1 and path[-1] in WEIGHT_NAMES and not _reads_metadata_only(node):
                paths.add(path[:-1])
    return frozenset(paths)


def _forward_trees(cls: type) -> Iterator[ast.AST]:
    """The parsed code of `cls.forward` and of the methods of `cls` it calls (`self.f(...)`),
    transitively, each node knowing its `parent`."""
    pending, visited = ["forward"], set()
    while pending:
        method = pending.pop()
        visited.add(method)
        tree = _method_tree(cls, method)
        if tree is None:
            continue
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child.parent = node  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            called = isinstance(node, ast.Call) and _self_path(node.func)
            if called and len(called) == 1 and called[0] not in visited and inspect.isfunction(getattr(cls, called[0], None)):
                pending.append(called[0])
        yield tree


def _method_tree(cls: type, name: str) -> ast.AST | None:
    """`method_tree`, but for torch's own modules (kept whole where they read weights: `torch_composites`)."""
    function = getattr(cls, name, None)
    if not inspect.isfunction(function) or function.__module__.startswith("torch."):
        return None
    return method_tree(cls, name)


def _self_path(node: ast.AST) -> tuple[str, ...] | None:
    """`("a", "b")` for the expression `self.a.b`, else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return tuple(reversed(names)) if isinstance(node, ast.Name) and node.id == "self" and names else None


def _reads_metadata_only(node: ast.AST) -> bool:
    parent = getattr(node, "parent", None)
    if isinstance(parent, ast.Attribute) and parent.attr in METADATA_READS:
        return True
    return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "isinstance"


def layers_checked_by_type(root: torch.nn.Module) -> Iterator[Site]:
    """torch.nn layers that a module above them tells apart by their type
    (`isinstance(layer, nn.Conv2d)`), which vLLM's replacement would change: Parakeet's
    subsampling masks the padded frames after each `nn.Conv2d` it finds among its layers,
    and vLLM's `Conv2dLayer` is none, so Nemotron-H-Omni's audio rows were computed from
    unmasked padding (relative difference 0.16). Read from the code each class's forward
    reaches, once per class."""
    checked: dict[type, tuple[type, ...]] = {}
    seen: set[int] = set()
    for module in root.modules():
        if type(module) not in checked:
            checked[type(module)] = _torch_types_checked(type(module))
        if not checked[type(module)]:
            continue
        for parent in module.modules():
            for name, child in parent.named_children():
                if isinstance(child, checked[type(module)]) and id(child) not in seen:
                    seen.add(id(child))
                    yield parent, name, child


def _torch_types_checked(cls: type) -> tuple[type, ...]:
    """The torch.nn classes that `isinstance` calls in the code `cls.forward` reaches name
    (not `_init_weights`, which tells every layer apart), resolved in its module's
    namespace (`nn.Conv2d`, `torch.nn.Linear`, or a tuple of them)."""
    namespace = vars(inspect.getmodule(cls) or object)
    found: list[type] = []
    for tree in _forward_trees(cls):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" and len(node.args) == 2:
                named = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                found += [t for t in map(lambda n: _resolve(n, namespace), named) if _is_torch_layer(t)]
    return tuple(dict.fromkeys(found))


def _resolve(node: ast.AST, namespace: dict) -> object:
    """The object a dotted name (`nn.Conv2d`) stands for in `namespace`, or None."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_resolve(node.value, namespace), node.attr, None)
    return None


def _is_torch_layer(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__.startswith("torch.nn.modules")


def norms_over_another_axis(root: torch.nn.Module) -> Iterator[Site]:
    """Leaf modules that reduce over another axis than the last (timm's `RmsNorm2d`, over
    the channels of an NCHW map, in Gemma 3n's MobileNetV5 tower). vLLM's RMSNorm fuser
    matches their `x * rsqrt(mean(x**2) + eps)` without reading the axis, and its RMSNorm
    normalizes the last one: the tower raised `size of tensor a (7) must match the size of
    tensor b (80)`. Judged once per class, from its traced forward."""
    verdicts: dict[type, bool] = {}
    for parent in root.modules():
        for name, child in parent.named_children():
            if type(child) not in verdicts:
                verdicts[type(child)] = _reduces_another_axis(child)
            if verdicts[type(child)]:
                yield parent, name, child


def _reduces_another_axis(module: torch.nn.Module) -> bool:
    if next(module.children(), None) is not None or not isinstance(getattr(module, "weight", None), torch.Tensor):
        return False
    try:
        graph = torch.fx.symbolic_trace(module).graph
    except Exception:  # noqa: BLE001 - a forward fx cannot trace is no norm vLLM's fuser matches either
        return False
    for node in graph.nodes:
        if getattr(node.target, "__name__", node.target) == "mean":
            dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
            if any(axis != -1 for axis in (dim if isinstance(dim, (list, tuple)) else [dim])):
                return True
    return False


def experts_modules(root: torch.nn.Module) -> Iterator[Site]:
    """Every child named `experts`, the modules vLLM's `MoEMixin` replaces."""
    for parent in root.modules():
        child = parent._modules.get(EXPERTS_NAME)
        if child is not None:
            yield parent, EXPERTS_NAME, child


def experts_without_routing(root: torch.nn.Module) -> Iterator[Site]:
    """`experts` modules whose forward cannot take the routing vLLM's fused-MoE layer is
    called with (Llama 4's experts take tokens already sorted and weighted per expert)."""
    for parent, name, child in experts_modules(root):
        if isinstance(child, _CONTAINERS):
            continue
        try:
            inspect.signature(child.forward).bind(*([None] * ROUTING_ARGUMENTS))
        except TypeError:
            yield parent, name, child


def experts_with_another_gated_mlp(root: torch.nn.Module) -> Iterator[Site]:
    """`experts` modules whose gated MLP is not `silu(gate) * up` over concatenated
    [gate; up] weights, the one vLLM's fused-MoE layer computes for HF experts: those whose
    `act_fn` is another function (Gemma 4's GELU), whose class gates in code of its own
    (transformers' `_apply_gate` hook overridden: MiniMax-M3's and Step-3.7's clamped
    gates), or that declare no gate or interleaved weights (`has_gate`, `is_concatenated`).
    Fused, they would compute another model without a word."""
    for parent, name, child in experts_modules(root):
        expert = child[0] if isinstance(child, _CONTAINERS) and len(child) else child
        if not gates_as_vllm_fuses(expert):
            yield parent, name, child


def experts_looping_over_hits(sites: Iterable[Site]) -> list[Site]:
    """The `sites` whose forward loops in Python, over the experts their tokens hit: a count
    read from the data, which vLLM's full-graph compile cannot trace (Step-3.7's own
    experts class; a list of experts, looped over by the block holding it). transformers'
    experts implementations (`use_experts_implementation`) dispatch through its experts
    interface instead, whose default under torch.compile is an op it registers, unless a
    model is set to its "eager" loop. Experts computed without a loop (Llama 4's batched
    matmuls) trace."""
    looping = []
    for parent, name, child in sites:
        if isinstance(child, _CONTAINERS):
            loops = _forward_loops(type(parent))
        elif "get_interface" in getattr(getattr(type(child).forward, "__code__", None), "co_names", ()):
            # the forward `use_experts_implementation` writes, which picks by the config's name
            loops = getattr(getattr(child, "config", None), "_experts_implementation", None) == "eager"
        else:
            loops = _forward_loops(type(child))
        if loops:
            looping.append((parent, name, child))
    return looping


def _forward_loops(cls: type) -> bool:
    tree = method_tree(cls)
    return tree is not None and any(isinstance(node, (ast.For, ast.While)) for node in ast.walk(tree))


WIDTH_ATTRIBUTE = "intermediate_dim"
"""Where transformers' experts (`use_experts_implementation`) keep their own width."""


def experts_of_another_width(sites: Iterable[Site]) -> tuple[int | None, list[Site]]:
    """(the width most of `sites` declare, the sites that declare another). vLLM's fused-MoE
    layer takes one width from the config (`moe_intermediate_size`, a list read per layer);
    Ernie 4.5 VL's `[1536, 512]` is per modality: its text experts are 1536 wide, its
    vision experts 512, in every layer. (None, []) where no experts declare a width."""
    widths = [(site, getattr(site[2], WIDTH_ATTRIBUTE, None)) for site in sites]
    declared = [width for _, width in widths if isinstance(width, int)]
    if not declared:
        return None, []
    width = max(declared, key=declared.count)
    return width, [site for site, own in widths if isinstance(own, int) and own != width]


def gates_as_vllm_fuses(expert: torch.nn.Module) -> bool:
    """Whether `expert` computes `silu(gate) * up` from concatenated [gate; up] weights."""
    from transformers.integrations.moe import _default_apply_gate

    own_gate = getattr(type(expert), GATE_HOOK, _default_apply_gate) is not _default_apply_gate
    layout = getattr(expert, "has_gate", True) and getattr(expert, "is_concatenated", True)
    return not own_gate and layout and computes_silu(getattr(expert, ACTIVATION_NAME, None))


def computes_silu(activation) -> bool:
    """Whether `activation` (a module or a function) computes SiLU, measured."""
    if not callable(activation):
        return False
    with torch.no_grad():
        measured = activation(ACTIVATION_PROBE.clone())
    return isinstance(measured, torch.Tensor) and torch.allclose(measured, torch.nn.functional.silu(ACTIVATION_PROBE))
