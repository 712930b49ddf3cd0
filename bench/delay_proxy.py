#!/usr/bin/env python3
"""A TCP proxy that delays every chunk by a fixed time in each direction, to
measure the ingest stream over a longer link than loopback (bench/RESULTS.md,
"gRPC's bandwidth probe off").

Usage: bench/delay_proxy.py LISTEN_PORT UPSTREAM_PORT DELAY_SECONDS
  then: build/bench/ingest_bench --connect=127.0.0.1:LISTEN_PORT ...
Order within a connection is kept; the delay adds to, not replaces,
loopback's own. Stop it with Ctrl-C.
"""
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if not data:
                writer.close()
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    while True:
        data = await reader.read(65536)
        await queue.put((time.monotonic() + delay, data))
        if not data:
            break
    await sender


async def main(listen_port, upstream_port, delay):
    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, up_writer, delay),
                             pump(up_reader, client_writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    try:
        ports = int(sys.argv[1]), int(sys.argv[2])
        delay = float(sys.argv[3])
    except ValueError:
        sys.exit(f"delay_proxy: ports must be integers and the delay a number of seconds\n{__doc__}")
    try:
        asyncio.run(main(ports[0], ports[1], delay))
    except KeyboardInterrupt:
        pass
