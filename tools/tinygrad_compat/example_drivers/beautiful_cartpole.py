"""examples/beautiful_cartpole.py run as a script (its 40 episodes of PPO with TinyJit train_step / get_action), with
a stand-in for gymnasium (not installed): CartPole's equations of motion, episodes cut at 12 steps. The losses of
the last training step, the test reward and the final weights are compared."""

import runpy
import sys
import time
import types

import numpy as np
from example_util import init_layers, patch_random, save
from tinygrad.nn.state import get_state_dict

RTOL, ATOL = 1e-3, 1e-4


class CartPole:
    """CartPole-v1's dynamics (Euler steps of 0.02 s); starts from a numpy-seeded state, truncated after 12 steps."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.observation_space = types.SimpleNamespace(shape=(4,))
        self.action_space = types.SimpleNamespace(n=2)

    def reset(self) -> tuple[np.ndarray, dict]:
        self.state, self.t = self.rng.uniform(-0.05, 0.05, 4), 0
        return self.state.astype(np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        x, v, th, w = self.state
        force = 10.0 if action == 1 else -10.0
        tmp = (force + 0.05 * w * w * np.sin(th)) / 1.1
        wacc = (9.8 * np.sin(th) - np.cos(th) * tmp) / (0.5 * (4.0 / 3.0 - 0.1 * np.cos(th) ** 2 / 1.1))
        acc = tmp - 0.05 * wacc * np.cos(th) / 1.1
        self.state = np.array([x + 0.02 * v, v + 0.02 * acc, th + 0.02 * w, w + 0.02 * wacc])
        self.t += 1
        done = bool(abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.2095)
        return self.state.astype(np.float32), 1.0, done, self.t >= 12, {}


sys.modules["gymnasium"] = types.SimpleNamespace(make=lambda *a, **k: CartPole(), Env=CartPole)  # type: ignore[assignment]
init_layers(reseed=patch_random())
start = time.perf_counter()
g = runpy.run_path("examples/beautiful_cartpole.py", run_name="__main__")
seconds = time.perf_counter() - start
weights = {k.replace(".", "_"): v for k, v in get_state_dict(g["model"]).items()}
save(seconds, action_loss=g["action_loss"], entropy_loss=g["entropy_loss"], critic_loss=g["critic_loss"],
     test_rew=g["test_rew"], **weights)
