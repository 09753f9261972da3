"""DeepNorm written independently of the grader's reference (`DeepNormVariant` in
grader/checks/placement.py), as PyTorch's `nn.TransformerEncoderLayer` with its own forward: the
oracle the reference is tested against. It lives in tests/ because notebook 04's Exercise 4 asks
for it: nothing a student installs may hold it."""

from torch import Tensor, nn


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    """DeepNet's encoder-only (α, β) = ((2N)^(1/4), (8N)^(-1/4)) for ``num_layers`` = N."""
    return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


class DeepNormBlock(nn.TransformerEncoderLayer):
    r"""DeepNorm block: Post-LN with an up-weighted residual and a down-scaled init.

    DeepNet (Wang et al. 2022, https://arxiv.org/abs/2203.00555) keeps Post-LN's placement but
    bounds the size of the model update, so very deep Post-LN stacks train. For an encoder-only
    (or decoder-only) stack of :math:`N` layers:

    .. math::
        x_{l+1} = \mathrm{LN}(\alpha x_l + F(x_l)), \quad
        \alpha = (2N)^{1/4}, \quad \beta = (8N)^{-1/4}

    and the value projection, attention output projection and both FFN weights are initialized
    Xavier-normal with gain :math:`\beta` (query and key with gain 1).

    A :class:`torch.nn.TransformerEncoderLayer` (ReLU, ``batch_first=True``) with its own
    ``forward``: same attributes, same ``state_dict`` keys, and PyTorch's mask polarity
    (``True`` = masked out) in ``forward``.

    Args:
        d_model: width D of the residual stream.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward sublayer.
        num_layers: the depth :math:`N` of the stack the block lives in.
        dropout: dropout on attention weights, sublayer outputs and the FFN hidden layer.
        eps: LayerNorm epsilon.

    Example:
        >>> block = DeepNormBlock(d_model=16, n_heads=2, d_ff=64, num_layers=4)
        >>> round(block.alpha, 3), round(block.beta, 3)
        (1.682, 0.42)
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        num_layers: int,
        dropout: float = 0.0,
        eps: float = 1e-5,
    ) -> None:
        super().__init__(d_model, n_heads, d_ff, dropout, layer_norm_eps=eps, batch_first=True)
        self.alpha, self.beta = deepnorm_constants(num_layers)
        w_q, w_k, w_v = self.self_attn.in_proj_weight.chunk(3)  # views into the packed weight
        for w in [w_q, w_k]:
            nn.init.xavier_normal_(w)
        for w in [w_v, self.self_attn.out_proj.weight, self.linear1.weight, self.linear2.weight]:
            nn.init.xavier_normal_(w, gain=self.beta)
        for b in [
            self.self_attn.in_proj_bias,
            self.self_attn.out_proj.bias,
            self.linear1.bias,
            self.linear2.bias,
        ]:
            nn.init.zeros_(b)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src  # (B, T, D)
        x = self.norm1(
            self.alpha * x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal)
        )
        return self.norm2(self.alpha * x + self._ff_block(x))  # (B, T, D)
