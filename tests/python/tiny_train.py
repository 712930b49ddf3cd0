"""A real, tiny PyTorch training loop (CPU) that reports through vigil.torch.

Trains a small MLP on synthetic regression data, one step every
--step-seconds, writes a checkpoint after --checkpoint-step (held for at
least --hold-seconds, as slow storage would), and makes the loss of
--nan-step NaN on purpose (that step skips its update, as GradScaler does
with a non-finite loss, and the job then stalls for --hold-seconds so that
an agent tick sees the NaN even without event delivery). Exits 0 after
--steps steps, printing the client's counters.

Run with /usr/bin/python3 (Debian's python3-torch) and PYTHONPATH=python.
"""

import argparse
import os
import sys
import tempfile
import time

import torch

import vigil
import vigil.torch


def hold(start, seconds):
    """Keeps the job busy until `seconds` after `start` (simulated work)."""
    left = start + seconds - time.perf_counter()
    if left > 0:
        time.sleep(left)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--checkpoint-step", type=int, default=10)
    parser.add_argument("--nan-step", type=int, default=25)
    parser.add_argument("--hold-seconds", type=float, default=2.5)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs = torch.randn(args.steps * 32, 16)
    targets = inputs.sum(dim=1, keepdim=True) * 0.1
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(inputs, targets), batch_size=32)

    client = vigil.Client(job=args.job, socket=args.socket, rank=0, local_rank=0,
                          world_size=1, retry_min_seconds=0.2)
    monitor = vigil.torch.StepMonitor(client=client, model=model,
                                      tokens_per_step=32, peak_flops=1e12)
    with tempfile.TemporaryDirectory() as ckpt_dir:
        for step, (x, y) in enumerate(monitor.wrap_loader(loader), start=1):
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            if step == args.nan_step:
                loss = loss * float("nan")
            grad_norm = None
            if torch.isfinite(loss):
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            hold(start, args.step_seconds)
            monitor.step(loss, grad_norm=grad_norm, step=step)
            if step == args.nan_step:
                hold(time.perf_counter(), args.hold_seconds)
            if step == args.checkpoint_step:
                with monitor.checkpoint():
                    start = time.perf_counter()
                    torch.save(model.state_dict(), os.path.join(ckpt_dir, "model.pt"))
                    hold(start, args.hold_seconds)
    client.close()
    print("tiny_train: sent %d dropped %d errors %d last_error %s"
          % (client.sent, client.dropped, client.errors, client.last_error))
    return 0 if client.sent > 0 and client.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
