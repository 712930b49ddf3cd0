"""The line-protocol client of vigil-agent's training endpoint (stdlib only).

A Client never slows down or breaks the training loop it reports from:
sends are non-blocking, a message the socket cannot take at once is
dropped and counted, an absent agent is retried lazily with exponential
backoff on later calls, and no exception escapes. It needs no thread.
"""

import contextlib
import json
import os
import socket as _socket
import time

DEFAULT_SOCKET = "/run/vigil/train.sock"
PROTOCOL_VERSION = 1

# Optional numeric fields of a step message (python/README.md).
STEP_FIELDS = (
    "loss",
    "grad_norm",
    "tokens_per_second",
    "step_time_seconds",
    "dataloader_wait_seconds",
    "loss_scale",
    "mfu_ratio",
    "torch_reserved_bytes",
    "torch_allocated_bytes",
    "torch_alloc_retries_total",
)

PHASES = ("checkpoint_start", "checkpoint_end", "eval_start", "eval_end")

_SEND_FLAGS = getattr(_socket, "MSG_DONTWAIT", 0) | getattr(_socket, "MSG_NOSIGNAL", 0)
# Bytes of replies (error lines) read per call at most.
_REPLY_CHUNK = 65536


def _env_int(*names):
    """The first of the environment variables `names` that holds an int."""
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                continue
    return None


def _env_str(*names):
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


class Client:
    """Pushes one rank's step readings to the node's vigil-agent.

    job: the job name; default $VIGIL_JOB, else $SLURM_JOB_NAME, else
        $SLURM_JOB_ID, else none (the agent reports its idle job).
    socket: the agent's socket; default $VIGIL_SOCKET, else
        /run/vigil/train.sock.
    rank, local_rank, world_size: default $RANK / $LOCAL_RANK / $WORLD_SIZE,
        else $SLURM_PROCID / $SLURM_LOCALID / $SLURM_NTASKS (rank else 0).
    gpu: the CUDA device index this rank uses; labels its torch_* series
        (the agent falls back to local_rank). May be set before the first
        message (vigil.torch.StepMonitor does).
    retry_min_seconds, retry_max_seconds: after a failed connect, the next
        attempt waits retry_min_seconds, doubling up to retry_max_seconds.

    Counters: sent (lines handed to the socket), dropped (lines lost: agent
    absent, socket full, bad arguments), errors (error replies from the
    agent); last_error says why the latest problem happened. Not
    thread-safe: use one Client per process, from one thread.
    """

    def __init__(self, job=None, socket=None, rank=None, local_rank=None,
                 world_size=None, gpu=None, retry_min_seconds=1.0,
                 retry_max_seconds=30.0):
        self.job = job or _env_str("VIGIL_JOB", "SLURM_JOB_NAME", "SLURM_JOB_ID")
        self.socket_path = socket or os.environ.get("VIGIL_SOCKET") or DEFAULT_SOCKET
        self.rank = rank if rank is not None else (_env_int("RANK", "SLURM_PROCID") or 0)
        self.local_rank = (local_rank if local_rank is not None
                           else _env_int("LOCAL_RANK", "SLURM_LOCALID"))
        self.world_size = (world_size if world_size is not None
                           else _env_int("WORLD_SIZE", "SLURM_NTASKS"))
        self.gpu = gpu
        self.retry_min_seconds = retry_min_seconds
        self.retry_max_seconds = retry_max_seconds
        self.sent = 0
        self.dropped = 0
        self.errors = 0
        self.last_error = None
        self._sock = None
        self._pid = None  # process that opened _sock (a fork child must not share it)
        self._pending = b""  # unsent tail of a line; goes out before anything else
        self._replies = b""
        self._backoff = 0.0
        self._next_attempt = 0.0

    @property
    def connected(self):
        """True while a connection to the agent is open."""
        return self._sock is not None

    def step(self, step, **readings):
        """Reports the readings of completed step `step` (an int >= 0).

        readings: any of STEP_FIELDS, as numbers (floats, ints, 0-d tensors);
        None or missing fields are left out, NaN/inf are sent as such.
        Unknown or non-numeric fields are left out and noted in last_error.
        Returns True when the line went to the agent, False when dropped.
        """
        try:
            message = {"type": "step", "step": int(step)}
            for name, value in readings.items():
                if value is None:
                    continue
                if name not in STEP_FIELDS:
                    self.last_error = "unknown step field %r left out" % name
                    continue
                try:
                    message[name] = float(value)
                except (TypeError, ValueError, RuntimeError) as e:
                    self.last_error = "field %r left out: %s" % (name, e)
            return self._send(message)
        except Exception as e:  # never into the training loop
            return self._drop("step not sent: %s" % e)

    def phase(self, marker):
        """Sends a phase marker, one of PHASES. Returns True when sent."""
        if marker not in PHASES:
            return self._drop("unknown phase %r" % (marker,))
        return self._send({"type": "phase", "phase": marker})

    @contextlib.contextmanager
    def checkpoint(self):
        """Marks the block as writing a checkpoint (train_phase 1)."""
        self.phase("checkpoint_start")
        try:
            yield self
        finally:
            self.phase("checkpoint_end")

    @contextlib.contextmanager
    def evaluation(self):
        """Marks the block as evaluating (train_phase 2)."""
        self.phase("eval_start")
        try:
            yield self
        finally:
            self.phase("eval_end")

    def close(self):
        """Closes the connection; a later message reconnects."""
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._pending = b""
        self._replies = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # Internals. Every path below catches what it can raise.

    def _hello(self):
        message = {"v": PROTOCOL_VERSION, "type": "hello", "rank": int(self.rank)}
        if self.job:
            message["job"] = str(self.job)
        for name in ("local_rank", "world_size", "gpu"):
            value = getattr(self, name)
            if value is not None:
                message[name] = int(value)
        return message

    @staticmethod
    def _encode(message):
        # allow_nan (the default) writes NaN / Infinity / -Infinity tokens.
        return (json.dumps(message, separators=(",", ":")) + "\n").encode()

    def _drop(self, why):
        self.dropped += 1
        self.last_error = why
        return False

    def _send(self, message):
        try:
            line = self._encode(message)
        except (TypeError, ValueError) as e:
            return self._drop("cannot encode message: %s" % e)
        try:
            if self._pid is not None and self._pid != os.getpid():
                # Inherited across fork(): closing this process's copy of
                # the descriptor leaves the parent's connection alone.
                self.close()
                self._pid = None
            if self._sock is None and not self._connect():
                return self._drop(self.last_error)
            self._read_replies()
            if self._sock is None:
                return self._drop(self.last_error)
            if self._pending and not self._flush():
                return self._drop(self.last_error or "socket full")
            n = self._sock.send(line, _SEND_FLAGS)
            self._pending = line[n:]
            self.sent += 1
            return True
        except (BlockingIOError, InterruptedError):
            return self._drop("socket full: the agent is not keeping up")
        except OSError as e:
            self._disconnect("connection lost: %s" % e)
            return self._drop(self.last_error)
        except Exception as e:  # never into the training loop
            return self._drop("not sent: %s" % e)

    def _flush(self):
        """Sends the pending tail; True when nothing is left pending."""
        try:
            n = self._sock.send(self._pending, _SEND_FLAGS)
        except (BlockingIOError, InterruptedError):
            self.last_error = "socket full: the agent is not keeping up"
            return False
        self._pending = self._pending[n:]
        return not self._pending

    def _connect(self):
        now = time.monotonic()
        if now < self._next_attempt:
            return False
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(self.socket_path)
            self._sock = sock
            self._pid = os.getpid()
            self._pending = self._encode(self._hello())
            self._flush()
        except OSError as e:
            sock.close()
            self._sock = None
            self._schedule_retry(now)
            self.last_error = "cannot reach vigil-agent at %s: %s" % (self.socket_path, e)
            return False
        self._backoff = 0.0
        return True

    def _schedule_retry(self, now):
        self._backoff = min(self.retry_max_seconds,
                            max(self.retry_min_seconds, self._backoff * 2))
        self._next_attempt = now + self._backoff

    def _disconnect(self, why):
        self.close()
        self.last_error = why
        self._schedule_retry(time.monotonic())

    def _read_replies(self):
        """Reads the agent's error lines without blocking."""
        try:
            data = self._sock.recv(_REPLY_CHUNK, getattr(_socket, "MSG_DONTWAIT", 0))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._disconnect("connection lost: %s" % e)
            return
        if not data:
            self._disconnect("vigil-agent closed the connection")
            return
        self._replies += data
        *lines, self._replies = self._replies.split(b"\n")
        for raw in lines:
            self.errors += 1
            try:
                self.last_error = "vigil-agent: %s" % json.loads(raw).get("error", raw)
            except (ValueError, AttributeError):
                self.last_error = "vigil-agent: %r" % raw[:200]
        if len(self._replies) > _REPLY_CHUNK:
            self._replies = b""
