"""The embedding table's optimizer: Adam on one tensor, in place.

``TableAdam(rows, lr)`` computes what ``torch.optim.Adam([rows], lr=lr)`` computes with its
defaults (betas 0.9 / 0.999, eps 1e-8, no weight decay, no amsgrad), with the operations of
torch's single-tensor path in its order, so the rows are bit for bit torch's (at one intra-op
thread: with two, torch's CPU kernels themselves gave other bits between calls in 2 of 80
processes)::

    step += 1                                          (a float32 counter on the host)
    m = lerp(m, g, 1 - beta1)
    v = beta2 v + (1 - beta2) g^2
    rows -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)

Its state has torch's layout (``state[rows]``: ``step``, ``exp_avg``, ``exp_avg_sq``), so
checkpoints hold the same keys. It exists because any ``torch.optim`` optimizer imports
``torch._dynamo`` (and sympy) when it is built: about 70 MiB of resident memory in every worker
that a recommender rank otherwise never needs, which at k = 4 is a sixth of a rank of a 20M
interaction graph. The table's optimizer belongs with the table, as torchrec's fused embedding
optimizers do.
"""
from __future__ import annotations

import torch

__all__ = ["TableAdam"]


class TableAdam:
    """Adam on ``rows`` (a leaf tensor with ``requires_grad``); ``zero_grad`` / ``step`` /
    ``state`` as ``torch.optim.Adam``'s."""

    def __init__(self, rows: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        if not lr > 0 or not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0 or not eps >= 0:
            raise ValueError(f"Adam needs lr > 0, betas in [0, 1) and eps >= 0, got {lr}, {betas}, {eps}")
        self.rows, self.lr, self.betas, self.eps = rows, float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.state: dict = {rows: {}}
        """``{rows: {"step", "exp_avg", "exp_avg_sq"}}``, empty before the first step."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        if set_to_none or self.rows.grad is None:
            self.rows.grad = None
        else:
            self.rows.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        p, g = self.rows, self.rows.grad
        if g is None:
            return
        st = self.state[p]
        if not st:
            st.update(step=torch.tensor(0.0, dtype=torch.float32), exp_avg=torch.zeros_like(p),
                      exp_avg_sq=torch.zeros_like(p))
        beta1, beta2 = self.betas
        st["step"] += 1
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        step = st["step"].item()  # host counter: no device sync
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = self.lr / bias_correction1
        denom = (v.sqrt() / bias_correction2 ** 0.5).add_(self.eps)
        p.addcdiv_(m, denom, value=-step_size)
