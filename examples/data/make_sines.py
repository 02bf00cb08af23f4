"""Writes examples/data/sines-train.npz and sines-held-out.npz: noisy sinusoids and their frequency class.

Deterministic (seeded); run it again to remake the files. Fields: `wave`
[32] f32 (the samples) and `label` [] i32 (which of 4 frequencies).
"""
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make(n: int, seed: int):
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 4, n).astype(np.int32)
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    t = np.arange(32)[None, :]
    wave = np.sin(2 * np.pi * (label[:, None] + 1) * t / 32 + phase) + rng.normal(0, 0.5, (n, 32))
    return {"wave": wave.astype(np.float32), "label": label}


if __name__ == "__main__":
    np.savez_compressed(HERE / "sines-train.npz", **make(2048, 0))
    np.savez_compressed(HERE / "sines-held-out.npz", **make(512, 1))
