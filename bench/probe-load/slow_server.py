#!/usr/bin/env python3
"""An HTTP/1.1 server on 127.0.0.1 that answers every request after a fixed
delay, so that a prober's probes stay in flight for that long: with
`probe-load` and `kubelet-probes load` at period P and delay D, about D/P of
each prober's time is a probe in flight (bench/RESULTS.md, memory per HTTP
probe in flight).

    slow_server.py PORT DELAY_MS
"""
import asyncio
import sys


async def handle(reader, writer, delay):
    try:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(delay)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port, delay):
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, delay), "127.0.0.1", port, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]) / 1000.0))
