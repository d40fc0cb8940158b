"""
``LeducMatch-v0``: a match of OpenSpiel's Leduc poker against a fixed opponent whose style is unknown, one
decision per step, with action masks.

The game, its rules, deal, legal actions, observation and payoffs are OpenSpiel's (``open-spiel`` on PyPI, the
``masking-study`` extra: ``pip install -e ".[masking-study]"``); ``pyspiel`` is imported only when the env is made.
What this module adds: the opponent (two simple scripted styles, one drawn per match), the match (several hands
against the same opponent) and the per-step view (OpenSpiel's per-step ``observation_tensor`` of the current
hand, not its ``information_state_tensor``, with the legal actions appended).
"""

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from benchmarks.envs import check_invalid_actions
from sb3_reset_ppo.envs.cue_recall import METADATA, check_render_mode, row_image

# The opponent's styles, one drawn uniformly per match
STYLES = ("honest", "bluffer")
# OpenSpiel's Leduc actions
FOLD, CALL, RAISE = 0, 1, 2
N_ACTIONS = 3


def _pyspiel() -> Any:
    try:
        return importlib.import_module("pyspiel")
    except ImportError as error:
        raise ImportError('LeducMatch-v0 needs OpenSpiel: pip install -e ".[masking-study]" (open-spiel)') from error


def is_strong(private_card: int, public_card: int | None) -> bool:
    """
    Whether a Leduc hand is strong for the scripted styles: a King, or a pair with the public card.

    :param private_card: The player's card, ``0 .. 5`` (rank ``card // 2``: J, Q, K)
    :param public_card: The public card, or ``None`` before it is dealt
    :return: ``True`` for a King or a pair
    """
    if not 0 <= private_card <= 5:
        raise ValueError(f"private_card must be in [0, 5], got {private_card}")
    return private_card // 2 == 2 or (public_card is not None and public_card // 2 == private_card // 2)


def style_action(style: str, private_card: int, public_card: int | None, facing_bet: bool) -> int:
    """
    The opponent's action (deterministic; never a raise when facing a bet, so always legal).

    - ``"honest"``: not facing a bet, raises with a strong hand (:func:`is_strong`) and checks otherwise; facing a
      bet, calls with a strong hand and folds otherwise.
    - ``"bluffer"``: not facing a bet, raises with a weak hand and checks a strong one; facing a bet, always calls.

    A raise means a strong hand from one and a weak hand from the other, so the best reply to it depends on the
    style, which only earlier hands show.

    :param style: One of :data:`STYLES`
    :param private_card: The opponent's card
    :param public_card: The public card, or ``None`` in the first round
    :param facing_bet: Whether the opponent must call a raise (fold is legal)
    :return: An OpenSpiel Leduc action (``FOLD``, ``CALL`` or ``RAISE``)
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    strong = is_strong(private_card, public_card)
    if facing_bet:
        return CALL if strong or style == "bluffer" else FOLD
    return RAISE if strong == (style == "honest") else CALL


def cards(state: Any) -> tuple[int, int, int | None]:
    """
    The cards dealt so far in an OpenSpiel Leduc state: player 0's, player 1's, the public card (``None`` before).

    :param state: A ``pyspiel`` Leduc state after both private cards are dealt
    :return: ``(card of player 0, card of player 1, public card or None)``
    """
    # history: the two private deals, then the actions, with the public deal among them (a chance node)
    history = state.full_history()
    deals = [item.action for item in history if item.player == -1]
    return deals[0], deals[1], deals[2] if len(deals) > 2 else None


def opponent_action(state: Any, style: str) -> int:
    """
    The action of the opponent (player 1) with ``style`` in ``state`` (player 1 to move).

    :param state: A ``pyspiel`` Leduc state, player 1 to act
    :param style: One of :data:`STYLES`
    :return: The action
    """
    _, card, public = cards(state)
    return style_action(style, card, public, facing_bet=FOLD in state.legal_actions())


class LeducMatchEnv(gym.Env[np.ndarray, np.int64]):
    """
    A match of ``n_hands`` hands of OpenSpiel's Leduc poker (``pyspiel.load_game("leduc_poker")``), played as
    player 0 against one opponent whose style (:func:`style_action`: ``"honest"`` or ``"bluffer"``) is drawn
    uniformly at the start of the match and not shown.

    Each step is one decision of player 0. The observation is OpenSpiel's per-step ``observation_tensor(0)`` of
    the current hand (16 numbers: the observer, its private card, the public card, both players' contributions to
    the pot), which does not hold the earlier hands nor the order of the bets, followed by the legal actions
    (3 numbers, fold/call/raise, 1 where legal; OpenSpiel's observation alone does not determine them). The mask
    (:meth:`action_masks`) is those 3 numbers. The opponent's moves and the deals (chance, seeded by ``reset``)
    are played between the steps. A hand's payoff (OpenSpiel's ``returns()[0]``, in chips, -13 to 13) is the
    reward of the step that ends it; the episode ends after the last hand. An invalid action (one the mask
    excludes) gives reward ``invalid_reward`` and changes nothing else (the step is taken again); the
    ``max_invalid``-th of an episode ends it.

    Why memory matters: a raise from the honest style means a strong hand, from the bluffer a weak one, and only
    the bluffer calls a raise with a weak hand, so the best reply to a raise and whether a bluff pays depend on the
    style. The style shows in the earlier hands of the match (how often the opponent raised, whether a raise made
    it fold), which the per-step view forgets. Bounds per hand (:func:`hand_values`): ``docs/api/envs.md``.

    :param n_hands: Hands per match, at least 1
    :param invalid_reward: Reward of an invalid action (the step is then taken again), at most 0
    :param max_invalid: The invalid action that ends the episode (its number in the episode), at least 1
    :param render_mode: ``None`` or ``"rgb_array"`` (the observation, divided by 13, as a row of gray pixels)
    """

    metadata = METADATA

    def __init__(
        self, n_hands: int = 8, invalid_reward: float = -1.0, max_invalid: int = 10, render_mode: str | None = None
    ) -> None:
        if n_hands < 1:
            raise ValueError(f"n_hands must be at least 1, got {n_hands}")
        check_invalid_actions(invalid_reward, max_invalid)
        self.render_mode = check_render_mode(render_mode)
        self.game = _pyspiel().load_game("leduc_poker")
        self.n_hands = n_hands
        self.invalid_reward = float(invalid_reward)
        self.max_invalid = int(max_invalid)
        self._invalid = 0
        size = self.game.observation_tensor_size() + N_ACTIONS
        # one-hots, then contributions of at most 13 chips (ante 1, two raises of 2, two of 4), then the mask
        self.observation_space = spaces.Box(0.0, 13.0, shape=(size,), dtype=np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.style = STYLES[0]
        self._state: Any = None
        self._hand = 0

    def action_masks(self) -> np.ndarray:
        """
        The legal actions of the current decision (before the first reset and after the end of an episode: all
        ``False``).

        :return: A bool array of shape ``(3,)``: fold, call (or check), raise
        """
        mask = np.zeros(N_ACTIONS, dtype=bool)
        if self._state is not None and not self._state.is_terminal():
            mask[self._state.legal_actions()] = True
        return mask

    def _obs(self) -> np.ndarray:
        tensor = np.asarray(self._state.observation_tensor(0), dtype=np.float32)
        return np.concatenate([tensor, self.action_masks().astype(np.float32)])

    def _advance(self) -> float:
        """Play chance and the opponent until player 0 acts or the hand ends; start the next hand after one ends."""
        reward = 0.0
        while True:
            state = self._state
            if state.is_terminal():
                reward += float(state.returns()[0])
                self._hand += 1
                if self._hand == self.n_hands:
                    return reward
                self._state = self.game.new_initial_state()
            elif state.is_chance_node():
                outcomes, probabilities = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(int(self.np_random.choice(outcomes, p=probabilities)))
            elif state.current_player() == 1:
                state.apply_action(opponent_action(state, self.style))
            else:
                return reward

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.style = STYLES[int(self.np_random.integers(len(STYLES)))]
        self._hand = self._invalid = 0
        self._state = self.game.new_initial_state()
        self._advance()
        return self._obs(), {"style": self.style}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        chosen = int(action)
        if not 0 <= chosen < N_ACTIONS:
            raise ValueError(f"action must be in [0, {N_ACTIONS}), got {action}")
        if self._hand == self.n_hands or self._invalid >= self.max_invalid:
            raise RuntimeError("step() after the end of the episode: call reset()")
        if not self.action_masks()[chosen]:
            self._invalid += 1
            ended = self._invalid >= self.max_invalid
            return self._obs(), self.invalid_reward, ended, False, {"invalid_action": True, "style": self.style}
        self._state.apply_action(chosen)
        reward = self._advance()
        done = self._hand == self.n_hands
        if done:  # the last hand's final state: its observation, no legal action
            obs = np.concatenate(
                [np.asarray(self._state.observation_tensor(0), dtype=np.float32), np.zeros(N_ACTIONS, np.float32)]
            )
        else:
            obs = self._obs()
        return obs, reward, done, False, {"invalid_action": False, "style": self.style}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array" or self._state is None:
            return None
        return row_image(self._obs() / 13.0)


def hand_values() -> dict[str, float]:
    """
    Exact per-hand values of OpenSpiel's best response (player 0, recall within the hand) to each style and to
    their 50/50 mixture (the opponent's behaviour given its own cards and actions is the same mixture at every
    decision: both styles are deterministic and a style's past actions in the hand are what the mixture weighs).

    :return: ``{"honest": v, "bluffer": v, "mixture": v, "oracle": mean of the two}`` in chips per hand
    """
    pyspiel = _pyspiel()
    best_response = importlib.import_module("open_spiel.python.algorithms.best_response")
    policy_module = importlib.import_module("open_spiel.python.policy")
    game = pyspiel.load_game("leduc_poker")

    base: Any = policy_module.Policy

    class Styles(base):
        def __init__(self, weights: dict[str, float]) -> None:
            super().__init__(game, [1])
            self.weights = weights

        def action_probabilities(self, state: Any, player_id: int | None = None) -> dict[int, float]:
            # each style's weight times the probability (0 or 1) it gave the opponent's earlier actions in the hand
            replay = game.new_initial_state()
            reach = dict(self.weights)
            for item in state.full_history():
                if replay.current_player() == 1:
                    for style in reach:
                        if opponent_action(replay, style) != item.action:
                            reach[style] = 0.0
                replay.apply_action(item.action)
            total = sum(reach.values())
            if total == 0.0:  # a history no style plays (the best response visits it with reach 0)
                reach, total = dict(self.weights), sum(self.weights.values())
            probabilities = dict.fromkeys(state.legal_actions(), 0.0)
            for style, weight in reach.items():
                probabilities[opponent_action(state, style)] += weight / total
            return probabilities

    def value(weights: dict[str, float]) -> float:
        responder = best_response.BestResponsePolicy(game, 0, Styles(weights))
        return float(responder.value(game.new_initial_state()))

    values = {style: value({style: 1.0}) for style in STYLES}
    values["mixture"] = value({style: 1.0 / len(STYLES) for style in STYLES})
    values["oracle"] = sum(values[style] for style in STYLES) / len(STYLES)
    return values
