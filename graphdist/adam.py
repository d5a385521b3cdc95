"""Adam as ``torch.optim.Adam`` computes it, without ``torch.optim``: the dense weights of
``train-gcn`` (in parameter groups, with L2 weight decay per group) and ``train-rec``'s
embedding table (one tensor).

``Adam(params, lr)`` computes what ``torch.optim.Adam(params, lr=lr)`` computes with its
defaults otherwise (no amsgrad, no maximize, L2 ``weight_decay`` added to the gradient, not
decoupled), with the operations of torch's single-tensor path (``torch/optim/adam.py``,
``_single_tensor_adam``, torch 2.13) in their order, so the weights are bit for bit torch's on
CPU (at one intra-op thread: with two, torch's CPU kernels themselves gave other bits between
calls in 2 of 80 processes)::

    step += 1                                          (a float32 counter on the host)
    g = g + weight_decay * w                           (where weight_decay != 0)
    m = lerp(m, g, 1 - beta1)
    v = beta2 v + (1 - beta2) g^2
    w -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)

Why not ``torch.optim``: building any of its optimizers imports ``torch._dynamo`` and sympy,
about 70 MiB of resident memory and up to 1.5 CPU-s in every rank that otherwise never needs
them (:mod:`graphdist.torch_internals`, item 12: ``Optimizer.add_param_group``, which
``__init__`` calls, is wrapped by ``torch._disable_dynamo``, and ``step`` by
``_use_grad_for_differentiable``; both import it on their first call). So does
``get_state_dict`` (``torch.distributed.checkpoint.state_dict``) of such an optimizer, whose
layout :meth:`state_dict` writes instead. Its state has torch's
layout: ``state[param]`` holds ``step``, ``exp_avg``, ``exp_avg_sq``, and :meth:`state_dict`
returns what ``get_state_dict(model, torch.optim.Adam(...))`` returns for a plain module
(parameters by their names, every hyperparameter of torch's groups), so a checkpoint holds the
same keys as before and old ones load.
"""
from __future__ import annotations

from collections import defaultdict

import torch

__all__ = ["Adam"]

_TORCH_GROUP_FLAGS = {"amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                      "differentiable": False, "fused": None, "decoupled_weight_decay": False}
"""The group entries of ``torch.optim.Adam`` this optimizer holds fixed (written to
checkpoints as torch writes them)."""


class Adam:
    """``params``: tensors (leaves with ``requires_grad``) or groups ``{"params": [...], ...}``
    overriding ``lr`` / ``betas`` / ``eps`` / ``weight_decay`` as ``torch.optim``'s groups do."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        self.defaults = {"lr": float(lr), "betas": (float(betas[0]), float(betas[1])), "eps": float(eps),
                         "weight_decay": float(weight_decay)}
        self.param_groups: list[dict] = []
        """``{"params": [tensors], "lr", "betas", "eps", "weight_decay"}`` per group."""
        for g in groups:
            g = {**self.defaults, **g, "params": list(g["params"])}
            lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
            if not lr > 0 or not 0.0 <= b1 < 1.0 or not 0.0 <= b2 < 1.0 or not eps >= 0 or not wd >= 0:
                raise ValueError(f"Adam needs lr > 0, betas in [0, 1), eps >= 0 and weight_decay >= 0, "
                                 f"got {lr}, {(b1, b2)}, {eps}, {wd}")
            self.param_groups.append(g)
        self.state: defaultdict = defaultdict(dict)
        """``{param: {"step", "exp_avg", "exp_avg_sq"}}``, empty for a parameter before its first step."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    self._update(p, g)

    def _update(self, p, g: dict) -> None:
        """One step of ``p`` with its group ``g``'s hyperparameters."""
        (beta1, beta2), st, grad = g["betas"], self.state_of(p), p.grad
        st["step"] += 1
        if g["weight_decay"] != 0:
            grad = grad.add(p, alpha=g["weight_decay"])
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m.lerp_(grad, 1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = st["step"].item()  # host counter: no device sync
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        denom = (v.sqrt() / bias_correction2 ** 0.5).add_(g["eps"])
        p.addcdiv_(m, denom, value=-(g["lr"] / bias_correction1))

    def state_of(self, p) -> dict:
        """``p``'s state, torch's initial one (step 0, zero moments) before its first step."""
        st = self.state[p]
        if not st:  # torch's initial state: a float32 step on the host, zero moments
            st.update(step=torch.tensor(0.0, dtype=torch.float32), exp_avg=torch.zeros_like(p),
                      exp_avg_sq=torch.zeros_like(p))
        return st

    def state_dict(self, names: dict) -> dict:
        """``{"state": {name: {"step", "exp_avg", "exp_avg_sq"}}, "param_groups": [{..., "params":
        [names]}]}`` with ``names`` = ``{param: name}`` (a module's ``named_parameters``): the
        layout of ``torch.distributed.checkpoint.state_dict.get_state_dict``. A parameter not yet
        stepped gets torch's initial state (as ``get_state_dict`` initialises it)."""
        state, groups = {}, []
        for g in self.param_groups:
            for p in g["params"]:
                state[names[p]] = dict(self.state_of(p))
            groups.append({k: v for k, v in g.items() if k != "params"} | _TORCH_GROUP_FLAGS
                          | {"params": [names[p] for p in g["params"]]})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict, names: dict) -> None:
        """The inverse of :meth:`state_dict` (a checkpoint of this optimizer or of
        ``torch.optim.Adam`` through ``get_state_dict``): moments copied into place by name, and
        each group's hyperparameters from the saved group holding the same parameters."""
        saved = {tuple(g["params"]): g for g in sd["param_groups"]}
        for g in self.param_groups:
            key = tuple(names[p] for p in g["params"])
            if key not in saved:
                raise ValueError(f"the checkpoint's optimizer has no group of parameters {list(key)}; "
                                 f"it has {[list(k) for k in saved]}")
            g.update({k: saved[key][k] for k in ("lr", "eps", "weight_decay")},
                     betas=tuple(saved[key]["betas"]))
            for p in g["params"]:
                got, st = sd["state"][names[p]], self.state_of(p)
                for k in ("step", "exp_avg", "exp_avg_sq"):
                    st[k].copy_(torch.as_tensor(got[k]))
