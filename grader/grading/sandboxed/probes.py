"""Each exercise's probe: how an answer is called on one case's inputs, and what is kept of it.

A probe runs wherever the answer runs (the grading sandbox, the student's kernel) and, in the
grader's process, on the reference and on every known mistake. It returns what the exercise's
feedback names (`y`, "running_mean after training step 1"), as tensors or arrays; judging them
is the grader's, elsewhere. The sandboxed runner finds an exercise's probe by name in `PROBES`.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from .calling import Arrays, shape_argument, tensors, to_array

_TRANSFORMER = "torch.nn.modules.transformer"
LIBRARY_STACKS = frozenset(
    {
        f"{_TRANSFORMER}.TransformerEncoder",
        f"{_TRANSFORMER}.Transformer",
        "norm_utils.blocks.Encoder",
        "norm_utils.blocks.TinyLM",
    }
)
LIBRARY_BLOCKS = LIBRARY_STACKS | {
    f"{_TRANSFORMER}.TransformerEncoderLayer",
    f"{_TRANSFORMER}.TransformerDecoderLayer",
    "grader.reference.blocks._Block",
}
# The references and the known mistakes, which may be built on the library: filled in by the
# grader's checks in the grader's process, and so always empty where a student's code runs.
TRUSTED: set = set()


def probe_layer_norm(layer_norm, a: Arrays) -> Arrays:
    x, weight, bias = tensors(a, "x", "weight", "bias")
    shape = shape_argument(a["normalized_shape"])
    return {"y": layer_norm(x, shape, weight, bias, eps=float(a["eps"]))}


def probe_var(stable_var, a: Arrays) -> Arrays:
    (x,) = tensors(a, "x")
    return {"var": stable_var(x, dim=int(a["dim"]))}


def _gradients(grads, weight) -> Arrays:
    """A backward exercise's `(grad_x, grad_weight, grad_bias)`, by name."""
    names = ("grad_x", "grad_weight", "grad_bias")
    out = {n: g for n, g in zip(names, grads, strict=True) if g is not None}
    if weight is None:  # the exercise promises None for both, not gradients of a missing weight
        out["whether grad_weight and grad_bias are None"] = np.array(len(out) == 1)
    return out


def probe_backward(layer_norm_backward, a: Arrays) -> Arrays:
    grad_out, x, weight = tensors(a, "grad_out", "x", "weight")
    shape = shape_argument(a["normalized_shape"])
    return _gradients(layer_norm_backward(grad_out, x, shape, weight, eps=float(a["eps"])), weight)


def probe_batch_norm_backward(batch_norm_backward, a: Arrays) -> Arrays:
    grad_out, x, running_mean, running_var, weight = tensors(
        a, "grad_out", "x", "running_mean", "running_var", "weight"
    )
    grads = batch_norm_backward(
        grad_out,
        x,
        running_mean,
        running_var,
        weight,
        training=bool(a["training"]),
        eps=float(a["eps"]),
    )
    return _gradients(grads, weight)


def probe_fold(fold_batch_norm, a: Arrays) -> Arrays:
    names = ("weight", "bias", "running_mean", "running_var", "gamma", "beta")
    folded = fold_batch_norm(*tensors(a, *names), eps=float(a["eps"]))
    return dict(zip(("folded weight", "folded bias"), folded, strict=True))


def snapshot(value) -> np.ndarray:
    """The value now, so that later in-place updates cannot change what was recorded."""
    return np.array(to_array(value), copy=True)


def judged(out: Arrays, a: Arrays, parts: dict[str, tuple[str, ...]]) -> Arrays:
    """The outputs of the one part of a scenario that a case judges (`a["judged"]`, a key of
    `parts`, each the prefixes of its outputs' names); all of them when the case names none. A
    scenario's parts (its outputs, the running statistics) are then judged, and earn their
    points, apart: one slip in the running average does not cost the outputs' points."""
    if "judged" not in a:
        return out
    prefixes = parts[str(a["judged"])]
    return {k: v for k, v in out.items() if k.startswith(prefixes)}


BATCH_NORM_PARTS = {
    "training outputs": ("output of training step",),
    "running statistics": ("running_mean after training step", "running_var after training step"),
    "evaluation": (
        "output of the evaluation call",
        "running_mean after the evaluation call",
        "running_var after the evaluation call",
    ),
}


def probe_batch_norm(batch_norm, a: Arrays) -> Arrays:
    """Training steps on a["training batch 1"], a["training batch 2"], ... then one evaluation
    call on a["evaluation batch"] (each optional), keeping the part `a["judged"]` names."""
    running_mean, running_var, weight, bias = tensors(
        a, "running_mean", "running_var", "weight", "bias"
    )
    options = {"momentum": float(a["momentum"]), "eps": float(a["eps"])}
    out: Arrays = {}
    steps = sorted((k for k in a if k.startswith("training batch")), key=lambda k: int(k[15:]))
    for i, key in enumerate(steps):
        (x,) = tensors(a, key)
        y = batch_norm(x, running_mean, running_var, weight, bias, training=True, **options)
        out[f"output of training step {i + 1}"] = snapshot(y)
        out[f"running_mean after training step {i + 1}"] = snapshot(running_mean)
        out[f"running_var after training step {i + 1}"] = snapshot(running_var)
    if "evaluation batch" in a:
        (x,) = tensors(a, "evaluation batch")
        y = batch_norm(x, running_mean, running_var, weight, bias, training=False, **options)
        out["output of the evaluation call"] = snapshot(y)
        out["running_mean after the evaluation call"] = snapshot(running_mean)
        out["running_var after the evaluation call"] = snapshot(running_var)
    return judged(out, a, BATCH_NORM_PARTS)


FROM_KERAS_PARTS = {
    "evaluation": ("output in evaluation",),
    "running_mean": ("running_mean after training step",),
    "running_var": ("running_var after training step",),
}


def probe_batch_norm_from_keras(batch_norm_from_keras, a: Arrays) -> Arrays:
    """The ported layer evaluated on a["evaluation batch"], then trained on a["training
    batches"], keeping the part `a["judged"]` names."""
    gamma, beta, moving_mean, moving_variance = tensors(
        a, "gamma", "beta", "moving_mean", "moving_variance"
    )
    layer = batch_norm_from_keras(
        gamma,
        beta,
        moving_mean,
        moving_variance,
        momentum=float(a["momentum"]),
        epsilon=float(a["epsilon"]),
        batch_size=int(a["batch_size"]),
    )
    out = {}
    with torch.no_grad():
        out["output in evaluation"] = layer.eval()(torch.from_numpy(a["evaluation batch"].copy()))
        layer.train()
        for i, batch in enumerate(torch.from_numpy(a["training batches"].copy()), start=1):
            layer(batch)
            out[f"running_mean after training step {i}"] = snapshot(layer.running_mean)
            out[f"running_var after training step {i}"] = snapshot(layer.running_var)
    return judged(out, a, FROM_KERAS_PARTS)


def _model_from(a: Arrays) -> nn.Sequential:
    """Linear → BatchNorm1d → ReLU → Linear, with the weights and buffers given in `a`."""
    d, h = a["w1"].shape[1], a["w1"].shape[0]
    model = nn.Sequential(nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Linear(h, 3))
    names = {
        "0.weight": "w1",
        "0.bias": "b1",
        "1.weight": "gamma",
        "1.bias": "beta",
        "1.running_mean": "running_mean",
        "1.running_var": "running_var",
        "3.weight": "w2",
        "3.bias": "b2",
    }
    state = {k: torch.from_numpy(a[v].copy()) for k, v in names.items()}
    state["1.num_batches_tracked"] = torch.tensor(int(a["tracked"]))
    model.load_state_dict(state)
    model.train(bool(a["training"]))
    return model


def probe_predict(predict, a: Arrays) -> Arrays:
    model = _model_from(a)
    (x,) = tensors(a, "x")
    y = predict(model, x)
    bn = model[1]
    return {
        "y": snapshot(y),
        "whether the output carries an autograd graph": np.array(
            float(getattr(y, "requires_grad", False))
        ),
        "the model's mode after the call (train or eval)": np.array(float(model.training)),
        "running_mean": snapshot(bn.running_mean),
        "running_var": snapshot(bn.running_var),
        "num_batches_tracked": snapshot(bn.num_batches_tracked),
    }


def probe_group_norm(group_norm, a: Arrays) -> Arrays:
    x, weight, bias = tensors(a, "x", "weight", "bias")
    return {"y": group_norm(x, int(a["num_groups"]), weight, bias, eps=float(a["eps"]))}


def probe_rms_norm(rms_norm, a: Arrays) -> Arrays:
    x, weight = tensors(a, "x", "weight")
    shape = shape_argument(a["normalized_shape"])
    eps = float(a["eps"]) if "eps" in a else None
    return {"y": rms_norm(x, shape, weight, eps=eps)}


LOW_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def probe_rms_norm_upcast(rms_norm_upcast, a: Arrays) -> Arrays:
    """The output as float32, or in the dtype check only whether it has the input's dtype. A
    float16 or bfloat16 input travels as float32 with its dtype's name as a flag (NumPy has no
    bfloat16), its values already rounded to that dtype."""
    x, weight = tensors(a, "x", "weight")
    dtype = next((d for name, d in LOW_PRECISION.items() if name in a), x.dtype)
    x, weight = (None if t is None else t.to(dtype) for t in (x, weight))
    y = (
        rms_norm_upcast(x, weight, eps=float(a["eps"]))
        if "eps" in a
        else rms_norm_upcast(x, weight)
    )
    if "dtype_only" in a:
        return {"dtype kept": np.array(getattr(y, "dtype", None) == x.dtype)}
    return {"y": y.float() if getattr(y, "dtype", None) in LOW_PRECISION.values() else y}


def probe_mask(lengths_to_mask, a: Arrays) -> Arrays:
    lengths = a["lengths"].tolist() if "as_list" in a else torch.from_numpy(a["lengths"].copy())
    args = (lengths,) if "max_len" not in a else (lengths, int(a["max_len"]))
    mask = lengths_to_mask(*args)
    is_bool = getattr(mask, "dtype", None) in (torch.bool, np.bool_)
    return {"mask": torch.as_tensor(np.asarray(mask)) != 0, "bool dtype": np.array(is_bool)}


# An evaluation scenario judges everything: its outputs, and running statistics left as they were
MASKED_BATCH_NORM_PARTS = {
    "outputs": ("output at",),
    "running statistics": ("running_",),
    "evaluation": ("output at", "running_"),
}


def probe_masked_bn(masked_batch_norm, a: Arrays) -> Arrays:
    """Run the scenario: one call per step (training or eval), sharing the running statistics."""
    running_mean, running_var, weight, bias = tensors(
        a, "running_mean", "running_var", "weight", "bias"
    )
    kwargs = {
        "running_mean": running_mean,
        "running_var": running_var,
        "weight": weight,
        "bias": bias,
        "momentum": float(a["momentum"]),
        "eps": float(a["eps"]),
    }
    real, padding = [], []
    for step, training in enumerate(a["training"].tolist()):
        x = torch.from_numpy(a["x"][step].copy())
        mask = torch.from_numpy(a["mask"][step].copy())
        y = masked_batch_norm(x, mask, training=bool(training), **kwargs)
        if tuple(getattr(y, "shape", ())) != tuple(x.shape):
            return {"output": y}  # reported as a shape mismatch
        real.append(y[mask])
        padding.append(y[~mask])
    out = {"output at real tokens": torch.cat(real)}
    if running_mean is not None:
        out |= {"running_mean": running_mean, "running_var": running_var}
    if "grade_padding" in a:
        out["output at padding"] = torch.cat(padding)
    return judged(out, a, MASKED_BATCH_NORM_PARTS)


def probe_pool(masked_mean_pool, a: Arrays) -> Arrays:
    h, mask = tensors(a, "x", "mask")
    return {"pooled mean": masked_mean_pool(h, mask)}


def _my_batch_norm_scenario(module_cls, a: Arrays) -> Arrays:
    """The scenario of `probe_batch_norm`, run on a module: built with the case's eps and
    momentum (with its own defaults, `module_cls(num_features)`, where the case gives none),
    given its weight, bias and starting running statistics where the case has them (else the
    module's own initial values), then called in training mode on each training batch and in
    evaluation mode on the evaluation batch."""
    c = a["evaluation batch"].shape[1]
    bn = module_cls(c, **{k: float(a[k]) for k in ("eps", "momentum") if k in a})
    with torch.no_grad():
        for name in ("weight", "bias", "running_mean", "running_var"):
            if name in a:
                getattr(bn, name).copy_(torch.from_numpy(a[name].copy()))
    out: Arrays = {}
    steps = sorted((k for k in a if k.startswith("training batch")), key=lambda k: int(k[15:]))
    bn.train()
    for i, key in enumerate(steps, 1):
        out[f"output of training step {i}"] = snapshot(bn(torch.from_numpy(a[key].copy())))
        for name in ("running_mean", "running_var"):
            out[f"{name} after training step {i}"] = snapshot(getattr(bn, name))
    bn.eval()
    out["output of the evaluation call"] = snapshot(bn(torch.from_numpy(a["evaluation batch"])))
    for name in ("running_mean", "running_var"):
        out[f"{name} after the evaluation call"] = snapshot(getattr(bn, name))
    return judged(out, a, BATCH_NORM_PARTS)


EVAL_ACCURACY = "test accuracy of the trained network in evaluation mode"


def digits_mlp(norm_cls, depth: int, width: int, d_in: int, classes: int) -> nn.Sequential:
    """`depth` blocks Linear → norm_cls(width) → ReLU and a Linear to `classes`, He-initialized
    (notebook 05's network)."""
    sizes = [d_in] + [width] * depth
    blocks = [[nn.Linear(i, o), norm_cls(o), nn.ReLU()] for i, o in itertools.pairwise(sizes)]
    model = nn.Sequential(*(m for block in blocks for m in block), nn.Linear(width, classes))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def _sgd_step(model: nn.Module, velocity: dict, lr: float, momentum: float) -> None:
    """One step of `torch.optim.SGD(lr=lr, momentum=momentum)`, written out: constructing that
    optimizer first imports torch._dynamo, 3 s of an exercise's time in a fresh runner."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is None:
                continue
            if p in velocity:
                velocity[p].mul_(momentum).add_(p.grad)
            else:
                velocity[p] = p.grad.clone()
            p.add_(velocity[p], alpha=-lr)


def _trained_accuracy(norm_cls, a: Arrays) -> Arrays:
    """Train notebook 05's MLP with `norm_cls` after every hidden Linear (SGD with momentum 0.9,
    mini-batches in an order drawn from the case's seed), then its accuracy in evaluation mode."""
    (x, x_test), (y, y_test) = tensors(a, "x", "x_test"), tensors(a, "y", "y_test")
    depth, width, batch, epochs, seed = (int(v) for v in a["depth, width, batch, epochs, seed"])
    torch.manual_seed(seed)
    model = digits_mlp(norm_cls, depth, width, x.shape[1], int(y.max()) + 1).train()
    order = torch.Generator().manual_seed(seed)
    velocity: dict[nn.Parameter, torch.Tensor] = {}
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=order).split(batch):
            model.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            _sgd_step(model, velocity, float(a["lr"]), momentum=0.9)
    model.eval()
    with torch.no_grad():
        right = (model(x_test).argmax(1) == y_test).double().mean()
    return {EVAL_ACCURACY: right}


def probe_my_batch_norm(module_cls, a: Arrays) -> Arrays:
    """A training scenario on the module alone (`_my_batch_norm_scenario`), or, for a case with
    data, the module trained end to end in a network (`_trained_accuracy`)."""
    if "x" in a:
        return _trained_accuracy(module_cls, a)
    return _my_batch_norm_scenario(module_cls, a)


class BuiltOnLibrary(RuntimeError):
    """The answer is, or delegates to, a library block. The static source scan cannot see this
    for a class defined in a notebook (`inspect.getsource` fails there), so the probe looks."""


def _own_work(factory, module: nn.Module, library: frozenset[str]) -> None:
    """Refuse an answer that is, subclasses or wraps one of the `library` modules (named by
    module and class, so that this package need not import norm_utils to know its blocks)."""
    if factory in TRUSTED:
        return
    for m in module.modules():
        kinds = {f"{c.__module__}.{c.__qualname__}" for c in type(m).__mro__}
        if kinds & library:
            kind = f"{type(m).__module__}.{type(m).__name__}"
            raise BuiltOnLibrary(
                f"it is, or contains, the library's {kind}; this exercise asks you to write it "
                "yourself, so it earns no points"
            )


def _load(module: nn.Module, a: Arrays) -> nn.Module:
    """The module in float64 with the case's weights (strict: every name must match)."""
    module = module.double()
    state = {k[2:]: torch.from_numpy(v.copy()) for k, v in a.items() if k.startswith("w:")}
    module.load_state_dict(state)
    return module.eval()  # dropout, if a student added some, must not perturb the check


ALONE = "how much the first sample's output changes when it runs alone"


def _forward_backward(module: nn.Module, a: Arrays, alone: bool = True) -> dict[str, torch.Tensor]:
    """Output and input gradient; with `alone`, also the first sample run by itself (a sample's
    output must not depend on the rest of the batch)."""
    x, cotangent = tensors(a, "x", "cotangent")
    x.requires_grad_(True)
    y = module(x)
    (y * cotangent).sum().backward()
    out = {"output": y, "gradient with respect to the input": x.grad}
    if alone:
        with torch.no_grad():
            out[ALONE] = module(x[:1].detach()) - y[:1].detach()
    return out


def probe_block(block_cls, a: Arrays) -> dict[str, torch.Tensor]:
    block = block_cls(*(int(v) for v in a["dims"]))  # (d_model, n_heads, d_ff[, num_layers])
    _own_work(block_cls, block, LIBRARY_BLOCKS)
    block = _load(block, a)
    if "f1_weight" not in a:
        return _forward_backward(block, a)

    # Stand-in sublayers: F₁(x) = tanh(x A) + c, F₂(x) = x B. An instance attribute shadows the
    # method, so the student's forward calls these wherever it calls self._sa_block/_ff_block.
    f1_weight, f1_bias, f2_weight = tensors(a, "f1_weight", "f1_bias", "f2_weight")
    block._sa_block = lambda x, *args, **kwargs: torch.tanh(x @ f1_weight) + f1_bias
    block._ff_block = lambda x, *args, **kwargs: x @ f2_weight
    seen: dict[str, list[torch.Tensor]] = {"norm1": [], "norm2": []}
    for name, inputs in seen.items():
        getattr(block, name).register_forward_hook(
            lambda module, args, out, inputs=inputs: inputs.append(args[0].detach().clone())
        )
    result = _forward_backward(block, a, alone=False)  # stand-ins never mix samples
    # Structure first, so that feedback names the norm that is misplaced before the output.
    out = {
        "how many times norm1 and norm2 are called": torch.tensor([len(v) for v in seen.values()])
    }
    for name, inputs in seen.items():  # what each norm reads (first call; empty if never called)
        out[f"what {name} receives"] = inputs[0] if inputs else torch.zeros(0)
    return out | result


INIT_GAIN = "the gain of {}'s initialization (its std ÷ Xavier-normal's with gain 1)"
# The weights whose init DeepNorm sets, in the order an "init weights" case indexes them.
INIT_WEIGHTS = ("w_q", "w_k", "w_v", "out_proj", "linear1", "linear2")


def probe_deepnorm_block(block_cls, a: Arrays) -> dict[str, torch.Tensor]:
    """`probe_block`'s checks on a block built for a stack of N layers (`a["dims"]` ends with
    N); with an "init seed", the gain each weight of `a["init weights"]` (indices into
    INIT_WEIGHTS) was drawn with instead: its std times sqrt((fan_in + fan_out) / 2),
    Xavier-normal's std with gain 1 being sqrt(2 / (fan_in + fan_out)). w_q, w_k, w_v are the
    three thirds of the packed `in_proj_weight`."""
    if "init seed" not in a:
        return probe_block(block_cls, a)
    with torch.random.fork_rng():  # a check cell never changes the notebook's random numbers
        torch.manual_seed(int(a["init seed"]))
        block = block_cls(*(int(v) for v in a["dims"]))
    _own_work(block_cls, block, LIBRARY_BLOCKS)
    attn = block.self_attn
    weights = (*attn.in_proj_weight.chunk(3), attn.out_proj.weight)
    weights += (block.linear1.weight, block.linear2.weight)
    read = {INIT_WEIGHTS[int(i)]: weights[int(i)] for i in a["init weights"]}
    return {
        INIT_GAIN.format(name): w.detach().double().std() * (sum(w.shape) / 2) ** 0.5
        for name, w in read.items()
    }


def probe_stack(encoder_cls, a: Arrays) -> dict[str, torch.Tensor]:
    layers, d, heads, d_ff = (int(v) for v in a["dims"])
    encoder = encoder_cls(layers, d, heads, d_ff)
    _own_work(encoder_cls, encoder, LIBRARY_STACKS)
    return _forward_backward(_load(encoder, a), a)


PROBES = {
    probe.__name__: probe
    for probe in (
        probe_layer_norm,
        probe_var,
        probe_backward,
        probe_batch_norm_backward,
        probe_fold,
        probe_batch_norm,
        probe_batch_norm_from_keras,
        probe_predict,
        probe_group_norm,
        probe_rms_norm,
        probe_rms_norm_upcast,
        probe_mask,
        probe_masked_bn,
        probe_pool,
        probe_block,
        probe_deepnorm_block,
        probe_stack,
        probe_my_batch_norm,
    )
}


QK_NORM_PARTS = {
    "attention weights": ("attention weights",),
    "attention sublayer": ("output of the attention sublayer", "how much q_norm and k_norm"),
}
QK_GROWN = "how much the attention weights move when the query and key weights grow"
QK_NORMALIZED = "how much q_norm and k_norm normalize, in queries"


def probe_qk_norm_block(block_cls, a: Arrays) -> dict[str, torch.Tensor]:
    """The block whole, or its sublayers replaced by stand-ins (both as `probe_block`); with
    `a["attention"]`, its attention alone: the weights `attention(x)` gives, the output of
    `_sa_block(x)` and how many values `q_norm` and `k_norm` each normalize there, in multiples
    of the queries' (so that one call for all heads and one call per head count alike; the part
    `a["judged"]` names); with `a["grown"]`, how much `attention(x)` moves when the query and
    key weights grow that much."""
    if "attention" not in a:
        return probe_block(block_cls, a)
    d, heads, d_ff = (int(v) for v in a["dims"])
    block = block_cls(d, heads, d_ff)
    _own_work(block_cls, block, LIBRARY_BLOCKS)
    block = _load(block, a)
    (x,) = tensors(a, "x")
    with torch.no_grad():
        before = snapshot(block.attention(x))
        if "grown" in a:
            for projection in (block.q_proj, block.k_proj):
                projection.weight.mul_(float(a["grown"]))
            return {QK_GROWN: snapshot(block.attention(x)) - before}
        normalized = {"q_norm": 0, "k_norm": 0}
        for name in normalized:
            getattr(block, name).register_forward_hook(
                lambda _, inputs, __, name=name: normalized.__setitem__(
                    name, normalized[name] + inputs[0].numel()
                )
            )
        out = {"output of the attention sublayer": snapshot(block._sa_block(x))}
    out[QK_NORMALIZED] = np.array(list(normalized.values())) / x.numel()
    return judged({"attention weights": before} | out, a, QK_NORM_PARTS)


PROBES[probe_qk_norm_block.__name__] = probe_qk_norm_block
