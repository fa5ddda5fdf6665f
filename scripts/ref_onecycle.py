#!/usr/bin/env python3
"""Write tests/data/onecycle_torch.txt: the lr and beta1 that torch.optim.lr_scheduler.OneCycleLR gives
each optimizer update, for the cases tests/test_schedule.c checks src/optim/schedule.c against.

Usage: python3 scripts/ref_onecycle.py > tests/data/onecycle_torch.txt   (needs PyTorch)

Row format: case total_steps pct_start anneal three_phase max_lr step lr beta1
The lr/beta1 of row `step` are the values the optimizer holds when it takes update `step` (0-based):
read before optimizer.step(), then scheduler.step(), as in a training loop.
"""
import torch

CASES = [  # (total_steps, pct_start, anneal, three_phase, max_lr)
    (100, 0.05, "cos", False, 1e-3),
    (100, 0.3, "cos", False, 1e-3),
    (100, 0.3, "linear", True, 6e-4),
]


def main():
    print(f"# OneCycleLR reference from torch {torch.__version__} (scripts/ref_onecycle.py)")
    print("# case total_steps pct_start anneal three_phase max_lr step lr beta1")
    for ci, (total, pct, anneal, three, max_lr) in enumerate(CASES):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([p], lr=max_lr)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=total, pct_start=pct,
                                                    anneal_strategy=anneal, three_phase=three)
        for step in range(total):
            g = opt.param_groups[0]
            print(f"{ci} {total} {pct!r} {anneal} {int(three)} {max_lr!r} {step} {g['lr']!r} {g['betas'][0]!r}")
            p.grad = torch.zeros(1)
            opt.step()
            sched.step()


if __name__ == "__main__":
    main()
