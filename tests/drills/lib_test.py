"""Unit tests of the drills' helpers that need no server (ctest: drills_lib)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import H2DataScanner  # noqa: E402


def frame(kind, payload):
    """One HTTP/2 frame of type `kind` on stream 1."""
    return len(payload).to_bytes(3, "big") + bytes([kind, 0]) + (1).to_bytes(4, "big") + payload


DATA, SETTINGS, PING, WINDOW_UPDATE = 0, 4, 6, 8


class H2DataScannerTest(unittest.TestCase):
    def test_transport_frames_are_not_messages(self):
        client = H2DataScanner(client_side=True)
        chunk = H2DataScanner.PREFACE + frame(SETTINGS, b"\0" * 6) + frame(WINDOW_UPDATE, b"\0" * 4)
        self.assertFalse(client.feed(chunk[:10]))
        self.assertFalse(client.feed(chunk[10:]))
        server = H2DataScanner(client_side=False)
        self.assertFalse(server.feed(frame(SETTINGS, b"") + frame(PING, b"p" * 8)))

    def test_a_message_is_seen_in_every_chunk_it_spans(self):
        server = H2DataScanner(client_side=False)
        chunk = frame(PING, b"p" * 8) + frame(DATA, b"m" * 100) + frame(PING, b"q" * 8)
        # the ping and 3 bytes of the DATA header; the rest of the header and
        # some payload; the payload's end and the next ping.
        self.assertFalse(server.feed(chunk[:20]))
        self.assertTrue(server.feed(chunk[20:50]))
        self.assertTrue(server.feed(chunk[50:130]))
        self.assertFalse(server.feed(frame(PING, b"r" * 8)))

    def test_an_empty_data_frame_is_no_message(self):
        server = H2DataScanner(client_side=False)
        self.assertFalse(server.feed(frame(DATA, b"")))


if __name__ == "__main__":
    unittest.main()
