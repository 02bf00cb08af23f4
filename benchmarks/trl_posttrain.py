"""TRL's own post-training numbers on a small fixed input, for the standard library's parity tests.

    /work/refvenv/bin/python -m benchmarks.trl_posttrain            # print the figures
    /work/refvenv/bin/python -m benchmarks.trl_posttrain --write    # and (re)write the fixture

Needs torch and trl (the `reference` environment); nothing downloads. On fixed random inputs
(seeded NumPy: logits [B T V], sampled tokens, log-probabilities, rewards, a completion mask with
rows of different lengths) it calls

- `GKDTrainer.generalized_jsd_loss` (trl.experimental.gkd), a static method, for several betas
  (0 and 1 are its forward and reverse KL) with the mask as its `labels` (-100 outside);
- `GRPOTrainer._compute_loss` (the method the trainer's `compute_loss` calls), on an object
  holding only the settings it reads, with `_get_per_token_logps_and_entropies` returning the
  fixed log-probabilities and entropies: each `loss_type` ("grpo", "bnpo", "dr_grpo", "dapo"), with
  eps low and high, and a KL to the reference (beta); its logged `kl`, `entropy` and
  `clip_ratio/region_mean`;
- the group-relative advantages as `GRPOTrainer._generate_and_score_completions` computes them
  (the group's mean and TRL's `nanstd`, plus 1e-4).

With `--write` it saves the inputs and TRL's numbers to tests/fixtures/posttrain/trl.npz, which
tests/test_stdlib_posttrain.py checks without torch or trl.
"""
from __future__ import annotations

import argparse
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "posttrain" / "trl.npz"

B, T, V, GROUP = 4, 6, 7, 2
BETAS = (0.0, 0.3, 0.5, 1.0)
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
EPS_LOW, EPS_HIGH, KL_BETA, MAX_LEN = 0.2, 0.28, 0.04, T


def inputs() -> dict[str, np.ndarray]:
    """The fixed inputs: a row of each length 6, 4, 1 and 3 (the mask), log-probabilities far
    enough from the sampler's that some ratios clip, rewards that differ within each group."""
    rng = np.random.default_rng(42)
    lengths = np.array([6, 4, 1, 3])
    mask = (np.arange(T)[None, :] < lengths[:, None])
    student = rng.standard_normal((B, T, V)).astype(np.float32) * 2
    p = np.exp(student - student.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return {
        "student": student,
        "teacher": rng.standard_normal((B, T, V)).astype(np.float32) * 2,
        "mask": mask,
        "log_p": (rng.standard_normal((B, T)) * 0.5 - 1.5).astype(np.float32),
        "old_log_p": (rng.standard_normal((B, T)) * 0.5 - 1.5).astype(np.float32),
        "ref_log_p": (rng.standard_normal((B, T)) * 0.5 - 1.5).astype(np.float32),
        "entropy": (-(p * np.log(p)).sum(-1)).astype(np.float32),   # the student's, as TRL computes it
        "rewards": np.array([1.0, 0.25, 0.5, 0.75], np.float32),
    }


def gkd(x: dict) -> dict[str, np.ndarray]:
    import torch
    from trl.experimental.gkd.gkd_trainer import GKDTrainer
    labels = torch.where(torch.tensor(x["mask"]), torch.zeros(B, T, dtype=torch.long), torch.full((B, T), -100))
    out = {}
    for beta in BETAS:
        v = GKDTrainer.generalized_jsd_loss(torch.tensor(x["student"]), torch.tensor(x["teacher"]), labels=labels,
                                            beta=beta)
        out[f"jsd_{beta}"] = np.float32(v.item())
    return out


def advantages(x: dict) -> np.ndarray:
    """GRPOTrainer's group advantages (scale_rewards "group"), with TRL's own `nanstd`."""
    import torch
    from trl.trainer.utils import nanstd
    r = torch.tensor(x["rewards"])
    mean = torch.nanmean(r.view(-1, GROUP), dim=1).repeat_interleave(GROUP, dim=0)
    std = nanstd(r.view(-1, GROUP), dim=1).repeat_interleave(GROUP, dim=0)
    return ((r - mean) / (std + 1e-4)).numpy()


def grpo(x: dict, adv: np.ndarray, loss_type: str) -> dict[str, np.ndarray]:
    """`GRPOTrainer._compute_loss` on the fixed log-probabilities, for `loss_type`."""
    import torch
    from collections import defaultdict
    from trl.trainer.grpo_trainer import GRPOTrainer

    log_p = torch.tensor(x["log_p"], requires_grad=True)
    mask = torch.tensor(x["mask"]).long()
    acc = types.SimpleNamespace(num_processes=1, gather=lambda t: t, gather_for_metrics=lambda t: t,
                                reduce=lambda t, reduction="sum": t)
    stub = types.SimpleNamespace(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
        beta=KL_BETA, loss_type=loss_type, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, use_vllm=False,
        vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=MAX_LEN, _entropy_bonus_enabled=False,
        aux_loss_enabled=False, _metrics={"train": defaultdict(list)}, accelerator=acc,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        _get_per_token_logps_and_entropies=lambda *a, **k: (log_p, torch.tensor(x["entropy"]), None))
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask,
              "advantages": torch.tensor(adv), "old_per_token_logps": torch.tensor(x["old_log_p"]),
              "ref_per_token_logps": torch.tensor(x["ref_log_p"]),
              "num_items_in_batch": mask.sum()}
    loss = GRPOTrainer._compute_loss(stub, None, inputs)
    loss.backward()
    m = stub._metrics["train"]
    return {f"{loss_type}_loss": np.float32(loss.item()), f"{loss_type}_grad": log_p.grad.numpy().copy(),
            "kl": np.float32(m["kl"][0]), "entropy_metric": np.float32(m["entropy"][0]),
            "clip_ratio": np.float32(m["clip_ratio/region_mean"][0])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {FIXTURE.relative_to(ROOT)}")
    a = ap.parse_args()
    x = inputs()
    out = {**x, **gkd(x), "advantages": advantages(x)}
    for lt in LOSS_TYPES:
        out.update(grpo(x, out["advantages"], lt))
    for k, v in out.items():
        if k not in x:
            print(f"{k:>16} {np.array2string(np.asarray(v), precision=6)}")
    if a.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        np.savez(FIXTURE, **out)
        print(f"wrote {FIXTURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
