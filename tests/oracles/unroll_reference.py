"""The design document's (docs/design.md) unroll written literally, one slot at a time: the fused unroll's reference."""

import torch as th


def reference_unroll(
    rnn: "th.nn.Module",
    features: "th.Tensor",
    memory: "tuple[th.Tensor, ...]",
    episode_starts: "th.Tensor",
    boundary: str,
) -> "th.Tensor":
    """
    The design document's (docs/design.md) unroll written literally, one slot at a time, for an LSTM or a GRU.

    :param features: ``(B, W, input)``
    :param memory: recorded memory entering every slot's step (LSTM ``(hidden, cell)``, GRU ``(hidden,)``), each
        ``(B, W, n_layers, hidden)``
    :param episode_starts: ``(B, W)``
    :param boundary: ``"reset"`` restores recorded memory at reset slots; ``"mask"`` carries it
    :return: ``(B, W, hidden)``
    """
    n_windows, window_size = episode_starts.shape
    # (B, W, L, H) -> (W, L, B, H)
    recorded = [m.permute(1, 2, 0, 3) for m in memory]
    state = [tensor[0] for tensor in recorded]
    outputs = []
    for slot in range(window_size):
        not_start = (1.0 - episode_starts[:, slot]).reshape(1, n_windows, 1)
        if slot > 0 and boundary == "reset":
            reset = (episode_starts[:, slot] > 0.5).reshape(1, n_windows, 1)
            state = [th.where(reset, tensor[slot], current) for tensor, current in zip(recorded, state, strict=True)]
        entering = [tensor * not_start for tensor in state]
        if isinstance(rnn, th.nn.LSTM):
            output, (hidden, cell) = rnn(features[:, slot].unsqueeze(0), (entering[0], entering[1]))
            state = [hidden, cell]
        else:
            output, hidden = rnn(features[:, slot].unsqueeze(0), entering[0])
            state = [hidden]
        outputs.append(output[0])
    return th.stack(outputs, dim=1)
