"""PyTorch helper: measures a training loop's step readings and reports them.

    from vigil.torch import StepMonitor
    monitor = StepMonitor(model=model, scaler=scaler, tokens_per_step=4096,
                          peak_flops=989e12)
    for batch in monitor.wrap_loader(loader):
        loss = ...; loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        monitor.step(loss, grad_norm=grad_norm)
        if step % 1000 == 0:
            with monitor.checkpoint():
                save()

Works on CPU-only PyTorch (the CUDA memory readings are then absent). Like
vigil.Client, it never raises into the training loop.
"""

import time

import torch  # Python 3 imports are absolute: this is PyTorch, not this file.

from vigil.client import Client

# torch.cuda.memory_stats() keys and the step fields they fill.
_MEMORY_STATS = (
    ("reserved_bytes.all.current", "torch_reserved_bytes"),
    ("allocated_bytes.all.current", "torch_allocated_bytes"),
    ("num_alloc_retries", "torch_alloc_retries_total"),
)


def _device_index(device):
    """The CUDA device index of `device` (int, str, torch.device or None)."""
    if isinstance(device, int):
        return device
    index = torch.device(device).index if device is not None else None
    return index if index is not None else torch.cuda.current_device()


def _to_float(value):
    return None if value is None else float(value)


class StepMonitor:
    """Times steps and reports each one through a vigil.Client.

    client: the Client to report through; default Client() (job, rank and
        socket from the environment).
    model: used for FLOPs per token when flops_per_token is not given
        (6 x parameters: forward plus backward of a dense model).
    scaler: a torch.cuda.amp.GradScaler; its scale is reported when enabled.
    tokens_per_step: tokens this rank processes per step (for tokens/s).
    flops_per_token: model FLOPs per token, forward plus backward.
    peak_flops: peak FLOP/s of this rank's device; MFU is reported only when
        given (with flops_per_token or model, and tokens).
    device: the CUDA device whose memory is read; default the current one.

    Step time is the time between two step() calls, less the time spent in
    checkpoint() and evaluation() blocks; the first step is timed from the
    monitor's creation, and each pass over wrap_loader() starts timing
    afresh (time between epochs is no step's). Reading loss, grad norm and
    the scaler's scale synchronizes with the GPU once per step.
    """

    def __init__(self, client=None, model=None, scaler=None, tokens_per_step=None,
                 flops_per_token=None, peak_flops=None, device=None):
        self.client = client if client is not None else Client()
        self.scaler = scaler
        self.tokens_per_step = tokens_per_step
        self.peak_flops = peak_flops
        self.flops_per_token = flops_per_token
        if flops_per_token is None and model is not None:
            self.flops_per_token = 6.0 * sum(p.numel() for p in model.parameters())
        self.device = None  # CUDA device index
        if torch.cuda.is_available():
            self.device = _device_index(device)
            if self.client.gpu is None:
                self.client.gpu = self.device
        self.steps = 0
        self._last = time.perf_counter()
        self._excluded = 0.0  # seconds of phases since the last step
        self._data_wait = 0.0  # seconds waiting for batches since the last step

    def step(self, loss=None, grad_norm=None, step=None, tokens=None):
        """Reports a completed step; returns True when it was sent.

        loss, grad_norm: numbers or 0-d tensors (NaN and inf are reported).
        step: the step number; default the count of step() calls so far.
        tokens: tokens of this step, overriding tokens_per_step.
        """
        try:
            now = time.perf_counter()
            elapsed = max(0.0, now - self._last - self._excluded)
            self._last, self._excluded = now, 0.0
            self.steps += 1
            readings = {
                "loss": _to_float(loss),
                "grad_norm": _to_float(grad_norm),
                "step_time_seconds": elapsed,
                "dataloader_wait_seconds": self._data_wait,
            }
            self._data_wait = 0.0
            tokens = tokens if tokens is not None else self.tokens_per_step
            if tokens is not None and elapsed > 0:
                readings["tokens_per_second"] = tokens / elapsed
                if self.flops_per_token and self.peak_flops:
                    readings["mfu_ratio"] = (self.flops_per_token * tokens / elapsed
                                             / self.peak_flops)
            if self.scaler is not None and self.scaler.is_enabled():
                readings["loss_scale"] = float(self.scaler.get_scale())
            if self.device is not None and torch.cuda.is_initialized():
                stats = torch.cuda.memory_stats(self.device)
                for key, field in _MEMORY_STATS:
                    if key in stats:
                        readings[field] = stats[key]
            number = step if step is not None else self.steps
            return self.client.step(number, **readings)
        except Exception as e:  # never into the training loop
            self.client.dropped += 1
            self.client.last_error = "step not measured: %s" % e
            return False

    def wrap_loader(self, iterable):
        """Yields the batches of `iterable`, timing how long each took."""
        self._last, self._excluded = time.perf_counter(), 0.0
        iterator = iter(iterable)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._data_wait += time.perf_counter() - start
            yield batch

    def checkpoint(self):
        """Context manager: a checkpoint (train_phase 1), not step time."""
        return _Excluded(self, self.client.checkpoint())

    def evaluation(self):
        """Context manager: evaluation (train_phase 2), not step time."""
        return _Excluded(self, self.client.evaluation())


class _Excluded:
    """Wraps a phase context manager, keeping its time out of step time."""

    def __init__(self, monitor, phase):
        self._monitor = monitor
        self._phase = phase
        self._start = 0.0

    def __enter__(self):
        self._start = time.perf_counter()
        return self._phase.__enter__()

    def __exit__(self, *exc):
        try:
            return self._phase.__exit__(*exc)
        finally:
            self._monitor._excluded += time.perf_counter() - self._start
