"""vigil.torch.StepMonitor with real PyTorch (CPU) against the stand-in agent.

Skipped where torch cannot be imported (Debian's python3-torch is only on
/usr/bin/python3).
"""

import math
import os
import tempfile
import unittest
from unittest import mock

try:
    import torch
except ImportError:
    torch = None

import vigil
from test_client import FakeAgent

if torch is not None:
    import vigil.torch as vtorch


class FakeClock:
    """Stands in for time.perf_counter; moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class FakeScaler:
    def __init__(self, scale, enabled=True):
        self.scale = scale
        self.enabled = enabled

    def is_enabled(self):
        return self.enabled

    def get_scale(self):
        return self.scale


@unittest.skipIf(torch is None, "PyTorch is not installed for this Python")
class StepMonitorTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.agent = FakeAgent(os.path.join(tmp.name, "train.sock"))
        self.addCleanup(self.agent.close)
        self.client = vigil.Client(job="tiny", socket=self.agent.path)
        self.addCleanup(self.client.close)
        self.clock = FakeClock()
        patcher = mock.patch.object(vtorch.time, "perf_counter", self.clock)
        patcher.start()
        self.addCleanup(patcher.stop)

    def messages(self, count):
        return [self.agent.next()[1] for _ in range(count)]

    def test_times_steps_and_derives_throughput(self):
        model = torch.nn.Linear(10, 10)  # 110 parameters
        monitor = vtorch.StepMonitor(client=self.client, model=model,
                                     scaler=FakeScaler(1024.0), tokens_per_step=50,
                                     peak_flops=1e6)
        data = [torch.randn(4, 10) for _ in range(2)]
        losses = []
        for batch in monitor.wrap_loader(data):
            self.clock.now += 0.5  # compute
            loss = model(batch).pow(2).mean()
            loss.backward()
            losses.append(loss.item())
            with monitor.checkpoint():
                self.clock.now += 7  # not step time
            self.assertTrue(monitor.step(loss, grad_norm=torch.tensor(0.25)))
        hello, ckpt_start, ckpt_end, first = self.messages(4)
        self.assertEqual(hello["job"], "tiny")
        self.assertNotIn("gpu", hello, "no CUDA here")
        self.assertEqual([ckpt_start["phase"], ckpt_end["phase"]],
                         ["checkpoint_start", "checkpoint_end"])
        self.assertEqual(first["step"], 1)
        self.assertAlmostEqual(first["loss"], losses[0], places=6)
        self.assertEqual(first["grad_norm"], 0.25)
        self.assertEqual(first["step_time_seconds"], 0.5)
        self.assertEqual(first["dataloader_wait_seconds"], 0.0)
        self.assertEqual(first["tokens_per_second"], 100.0)
        self.assertAlmostEqual(first["mfu_ratio"], 6 * 110 * 100 / 1e6)
        self.assertEqual(first["loss_scale"], 1024.0)
        for field in ("torch_reserved_bytes", "torch_allocated_bytes",
                      "torch_alloc_retries_total"):
            self.assertNotIn(field, first)
        self.assertEqual(self.messages(3)[2]["step"], 2)

    def test_dataloader_wait_is_measured(self):
        monitor = vtorch.StepMonitor(client=self.client)
        clock = self.clock

        def slow_loader():
            for i in range(2):
                clock.now += 0.25  # waiting for data
                yield i

        for _ in monitor.wrap_loader(slow_loader()):
            clock.now += 1
            monitor.step(1.0, step=40)
        _, first, second = self.messages(3)
        self.assertEqual(first["dataloader_wait_seconds"], 0.25)
        self.assertEqual(first["step_time_seconds"], 1.25)
        self.assertEqual(second["step"], 40)
        self.assertNotIn("tokens_per_second", second, "no token count given")

    def test_nan_loss_and_disabled_scaler(self):
        scaler = torch.cuda.amp.GradScaler(enabled=False)  # CPU: disabled
        monitor = vtorch.StepMonitor(client=self.client, scaler=scaler)
        monitor.step(torch.tensor(float("nan")))
        _, step = self.messages(2)
        self.assertTrue(math.isnan(step["loss"]))
        self.assertNotIn("loss_scale", step)

    def test_reads_cuda_memory_stats_when_cuda_is_there(self):
        stats = {"reserved_bytes.all.current": 8 << 30,
                 "allocated_bytes.all.current": 6 << 30,
                 "num_alloc_retries": 3}
        with mock.patch.object(torch.cuda, "is_available", return_value=True), \
                mock.patch.object(torch.cuda, "is_initialized", return_value=True), \
                mock.patch.object(torch.cuda, "current_device", return_value=2), \
                mock.patch.object(torch.cuda, "memory_stats",
                                  return_value=stats) as memory_stats:
            monitor = vtorch.StepMonitor(client=self.client)
            monitor.step(1.0)
        memory_stats.assert_called_with(2)
        hello, step = self.messages(2)
        self.assertEqual(hello["gpu"], 2)
        self.assertEqual(step["torch_reserved_bytes"], 8 << 30)
        self.assertEqual(step["torch_allocated_bytes"], 6 << 30)
        self.assertEqual(step["torch_alloc_retries_total"], 3)

    def test_never_raises_into_the_loop(self):
        monitor = vtorch.StepMonitor(client=self.client,
                                     scaler=FakeScaler(None))  # float(None) fails
        self.assertFalse(monitor.step(1.0))
        self.assertEqual(self.client.dropped, 1)
        self.assertIn("step not measured", self.client.last_error)


if __name__ == "__main__":
    unittest.main()
