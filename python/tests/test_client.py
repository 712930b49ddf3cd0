"""vigil.Client against a stand-in agent: a Unix socket server in this process.

Run: cd python && python3 -m unittest discover -s tests
"""

import json
import math
import os
import queue
import socket
import tempfile
import threading
import time
import unittest
from unittest import mock

import vigil
from vigil import client as client_module

TIMEOUT = 10  # seconds any wait for the stand-in may take at most


class FakeAgent:
    """Accepts connections on `path` and queues every line it receives as
    (connection number, raw bytes). reading=False accepts but never reads."""

    def __init__(self, path, reading=True):
        self.path = path
        self.reading = reading
        self.lines = queue.Queue()
        self.conns = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(16)
        self._accepted = threading.Semaphore(0)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            self._accepted.release()
            if self.reading:
                threading.Thread(target=self._read, args=(len(self.conns), conn),
                                 daemon=True).start()

    def _read(self, number, conn):
        buf = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self.lines.put((number, line))

    def wait_accepted(self):
        assert self._accepted.acquire(timeout=TIMEOUT), "no connection"

    def next(self):
        """The next (connection number, decoded message)."""
        number, raw = self.lines.get(timeout=TIMEOUT)
        return number, json.loads(raw)

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._listener.close()
        os.unlink(self.path)
        for conn in self.conns:
            # shutdown first: a reader thread blocked in recv() keeps a bare
            # close() from ending the connection.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "train.sock")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "VIGIL_"))
               and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        patcher = mock.patch.dict(os.environ, env, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.addCleanup(self.dir.cleanup)

    def client(self, **kwargs):
        c = vigil.Client(**kwargs)
        self.addCleanup(c.close)
        return c

    def agent(self, reading=True):
        agent = FakeAgent(self.path, reading)
        self.addCleanup(agent.close)
        return agent

    def test_hello_then_step_on_the_wire(self):
        agent = self.agent()
        c = self.client(job="llama", socket=self.path, rank=3, local_rank=1,
                         world_size=8, gpu=1)
        self.assertTrue(c.step(7, loss=2.5, grad_norm=0.5, tokens_per_second=100,
                               step_time_seconds=1.25, mfu_ratio=None))
        self.assertEqual(agent.next(), (1, {"v": 1, "type": "hello", "job": "llama",
                                            "rank": 3, "local_rank": 1,
                                            "world_size": 8, "gpu": 1}))
        self.assertEqual(agent.next(), (1, {"type": "step", "step": 7, "loss": 2.5,
                                            "grad_norm": 0.5,
                                            "tokens_per_second": 100.0,
                                            "step_time_seconds": 1.25}))
        self.assertEqual((c.sent, c.dropped), (1, 0))

    def test_identity_from_the_environment(self):
        agent = self.agent()
        os.environ.update({"VIGIL_SOCKET": self.path, "SLURM_JOB_NAME": "slurm-job",
                           "SLURM_JOB_ID": "42", "SLURM_PROCID": "5",
                           "SLURM_LOCALID": "1", "SLURM_NTASKS": "16"})
        self.client().step(1)
        _, hello = agent.next()
        agent.next()
        self.assertEqual(hello, {"v": 1, "type": "hello", "job": "slurm-job",
                                 "rank": 5, "local_rank": 1, "world_size": 16})
        # torchrun's variables and VIGIL_JOB win over Slurm's.
        os.environ.update({"VIGIL_JOB": "mine", "RANK": "9", "LOCAL_RANK": "2",
                           "WORLD_SIZE": "32"})
        self.client().step(1)
        _, hello = agent.next()
        self.assertEqual(hello, {"v": 1, "type": "hello", "job": "mine", "rank": 9,
                                 "local_rank": 2, "world_size": 32})

    def test_nan_and_infinity_are_sent_as_python_json_tokens(self):
        agent = self.agent()
        c = self.client(socket=self.path)
        c.step(3, loss=float("nan"), grad_norm=float("inf"), loss_scale=float("-inf"))
        agent.next()
        number, raw = agent.lines.get(timeout=TIMEOUT)
        self.assertIn(b'"loss":NaN', raw)
        self.assertIn(b'"grad_norm":Infinity', raw)
        self.assertIn(b'"loss_scale":-Infinity', raw)
        self.assertTrue(math.isnan(json.loads(raw)["loss"]))

    def test_phases_and_context_managers(self):
        agent = self.agent()
        c = self.client(socket=self.path)
        with c.checkpoint():
            pass
        with self.assertRaises(KeyError):  # the block's own error goes through
            with c.evaluation():
                raise KeyError("eval failed")
        agent.next()
        phases = [agent.next()[1]["phase"] for _ in range(4)]
        self.assertEqual(phases, ["checkpoint_start", "checkpoint_end",
                                  "eval_start", "eval_end"])

    def test_bad_arguments_never_raise(self):
        agent = self.agent()
        c = self.client(socket=self.path)
        self.assertFalse(c.phase("lunch"))
        self.assertFalse(c.step("not a step"))
        self.assertTrue(c.step(1, loss="low", mystery=1, grad_norm=object()))
        self.assertEqual(c.dropped, 2)
        agent.next()
        self.assertEqual(agent.next()[1], {"type": "step", "step": 1})

    def test_agent_absent_costs_nothing_and_backs_off(self):
        clock = [1000.0]
        with mock.patch.object(client_module.time, "monotonic", lambda: clock[0]):
            c = self.client(socket=self.path, retry_min_seconds=1,
                            retry_max_seconds=4)
            with mock.patch.object(client_module._socket, "socket",
                                   wraps=socket.socket) as made:
                for _ in range(100):
                    self.assertFalse(c.step(1, loss=1.0))
                self.assertEqual(made.call_count, 1, "retries wait for the backoff")
                # Waits 1, 2, 4, then 4 (the maximum).
                for advance, attempts in ((1.5, 2), (1.5, 2), (0.5, 3), (3.75, 3),
                                          (0.25, 4), (3.75, 4), (0.25, 5)):
                    clock[0] += advance
                    c.step(1)
                    self.assertEqual(made.call_count, attempts, clock[0])
            self.assertEqual(c.dropped, 107)
            self.assertIn("cannot reach vigil-agent", c.last_error)
    
    def test_reconnects_after_the_agent_restarts(self):
        agent = self.agent()
        c = self.client(job="j", socket=self.path, retry_min_seconds=0)
        self.assertTrue(c.step(1))
        agent.next()
        agent.next()
        agent.close()
        # The agent's going is noticed on a later call; lines meanwhile are
        # dropped, never raised.
        for _ in range(3):
            c.step(2)
        self.assertFalse(c.connected)
        agent = FakeAgent(self.path)
        self.addCleanup(agent.close)
        self.assertTrue(c.step(3, loss=1.0))
        number, hello = agent.next()
        self.assertEqual(hello["type"], "hello")
        self.assertEqual(agent.next(), (number, {"type": "step", "step": 3,
                                                 "loss": 1.0}))

    def test_a_stuck_agent_never_blocks_and_lines_stay_whole(self):
        agent = self.agent(reading=False)
        c = self.client(socket=self.path)
        start = time.monotonic()
        for i in range(5000):
            c.step(i, loss=1.0, grad_norm=0.5)
        elapsed = time.monotonic() - start
        self.assertLess(elapsed, 5.0)
        self.assertGreater(c.dropped, 0, "the socket buffer filled up")
        self.assertGreater(c.sent, 0)
        self.assertIn("socket full", c.last_error)
        # Once the agent reads again, every line it gets is whole.
        agent.wait_accepted()
        conn = agent.conns[0]
        conn.setblocking(False)
        data = b""
        while True:
            try:
                data += conn.recv(1 << 20)
            except BlockingIOError:
                break
        # Goes out after the tail of any line the full socket took in part.
        self.assertTrue(c.step(99999))
        conn.settimeout(TIMEOUT)
        while not data.endswith(b'"step":99999}\n'):
            chunk = conn.recv(1 << 20)
            self.assertTrue(chunk, "connection closed early")
            data += chunk
        lines = data.split(b"\n")[:-1]
        self.assertEqual(json.loads(lines[0])["type"], "hello")
        steps = [json.loads(line)["step"] for line in lines[1:]]
        self.assertEqual(len(steps), c.sent)
        self.assertEqual(steps, sorted(steps))

    def test_error_replies_are_counted(self):
        agent = self.agent()
        c = self.client(socket=self.path)
        c.step(1)
        agent.next()
        agent.next()
        # A Unix socket queues this at the client before sendall returns;
        # the client reads it on its next call.
        agent.conns[0].sendall(b'{"error":"field \'loss\' must be a number","line":2}\n')
        c.step(2)
        self.assertEqual(c.errors, 1)
        self.assertIn("must be a number", c.last_error)

    def test_a_forked_child_does_not_share_the_connection(self):
        agent = self.agent()
        c = self.client(socket=self.path)
        c.step(1)
        agent.next()
        agent.next()
        with mock.patch.object(client_module.os, "getpid", return_value=-1):
            c.step(2)
        number, hello = agent.next()
        self.assertEqual((number, hello["type"]), (2, "hello"))


if __name__ == "__main__":
    unittest.main()
