#!/usr/bin/env python3
"""Test-only Kafka TCP proxy that empties the tagged fields of ApiVersions v3+ responses.

Why this exists
---------------
Herald's tests and demo run against Tansu (an Apache-Kafka-compatible broker) because there is
no Apache Kafka on these machines. Debian 12's librdkafka 2.0.2 cannot parse Tansu's
ApiVersions v3 response: it fails with "Protocol read buffer underflow for ApiVersion v3"
because of a bug in how it skips tagged fields (fixed in librdkafka 2.2.0). Tansu sends the
top-level tagged fields SupportedFeatures / FinalizedFeaturesEpoch / FinalizedFeatures /
ZkMigrationReady; real Apache Kafka deployments are not affected the same way, and nothing in
Herald depends on those fields. So this proxy is a workaround for the *test* environment only:
never put it in front of a production cluster.

What it does
------------
It forwards bytes in both directions unchanged, except:
  * client -> broker: each request frame (int32 size, then request header: api_key int16,
    api_version int16, correlation_id int32, ...) is inspected; correlation ids of
    ApiVersions requests (api_key 18) with api_version >= 3 are remembered.
  * broker -> client: the response frame with a remembered correlation id (ApiVersions
    responses always use response header v0 = correlation_id only) gets its body re-encoded
    with every tagged-field section empty:
        error_code int16
        api_keys COMPACT_ARRAY (uvarint N+1) of
            api_key int16, min_version int16, max_version int16, tagged fields -> 0
        throttle_time_ms int32
        tagged fields -> 0   (SupportedFeatures, FinalizedFeatures... are dropped)
    and the frame size is fixed up. A body that does not parse (e.g. the v0-format error
    reply to an unsupported version) is forwarded unchanged.
The broker must advertise the proxy's address (tansu --advertised-listener-url), so clients
reconnect through the proxy after reading metadata.

With --tls-cert and --tls-key the proxy's listener speaks TLS (the upstream stays plain): the
test command's second broker, which Herald reaches over TLS with its documented settings
(HERALD_KAFKA_SECURITY_PROTOCOL=SSL, HERALD_KAFKA_SSL_CA_LOCATION).

Usage: kafka-apiversions-proxy.py --listen 127.0.0.1:PP --upstream 127.0.0.1:TP
                                  [--tls-cert PEM --tls-key PEM] [--verbose]
Python 3.11 standard library only.
"""

import argparse
import asyncio
import logging
import signal
import ssl
import struct

API_VERSIONS = 18
MAX_FRAME = 256 * 1024 * 1024  # larger (or negative) sizes: stop parsing, copy raw bytes
log = logging.getLogger("kafka-apiversions-proxy")
# Strong references to connection tasks: Python 3.11's StreamReaderProtocol holds its reader
# only weakly, so an idle connection task could otherwise be garbage-collected mid-await.
connections: set[asyncio.Task] = set()


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise ValueError("varint too long")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged field past end")
    return pos


def strip_api_versions_body(body: bytes) -> bytes:
    """Re-encode an ApiVersions v3+ response body with all tagged fields emptied."""
    (error_code,) = struct.unpack_from(">h", body, 0)
    n_plus_1, pos = read_uvarint(body, 2)
    out = bytearray(struct.pack(">h", error_code))
    out += write_uvarint(n_plus_1)  # 0 (null) or N+1, same as received
    for _ in range(max(n_plus_1 - 1, 0)):
        if len(body) < pos + 6:
            raise ValueError("truncated api_keys entry")
        out += body[pos:pos + 6]  # api_key, min_version, max_version
        pos = skip_tagged_fields(body, pos + 6)
        out += b"\x00"
    (throttle_ms,) = struct.unpack_from(">i", body, pos)
    pos = skip_tagged_fields(body, pos + 4)
    if pos != len(body):
        raise ValueError(f"{len(body) - pos} trailing bytes")
    out += struct.pack(">i", throttle_ms) + b"\x00"
    return bytes(out)


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
    """Returns (size, payload), or None at EOF before a new frame starts. Payload is empty
    when size is out of range (the caller then copies raw). Raises IncompleteReadError when
    the peer closes mid-frame."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    (size,) = struct.unpack(">i", prefix)
    if size < 0 or size > MAX_FRAME:
        return size, b""
    try:
        return size, await reader.readexactly(size)
    except asyncio.IncompleteReadError as e:
        raise asyncio.IncompleteReadError(prefix + e.partial, None) from None


async def copy_raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()


async def pump(reader, writer, direction: str, pending: set[int]) -> None:
    """Copies one direction frame by frame, then half-closes the other side."""
    try:
        while True:
            try:
                frame = await read_frame(reader)
            except asyncio.IncompleteReadError as e:
                writer.write(e.partial)  # peer closed mid-frame: pass on what we got
                break
            if frame is None:
                break
            size, payload = frame
            if len(payload) != size:
                log.warning("%s: frame size %d out of range, copying raw", direction, size)
                writer.write(struct.pack(">i", size))
                await copy_raw(reader, writer)
                break
            if direction == "request" and len(payload) >= 8:
                api_key, api_version, corr = struct.unpack_from(">hhi", payload, 0)
                if api_key == API_VERSIONS and api_version >= 3:
                    pending.add(corr)
            elif direction == "response" and len(payload) >= 4:
                (corr,) = struct.unpack_from(">i", payload, 0)
                if corr in pending:
                    pending.discard(corr)
                    try:
                        body = strip_api_versions_body(payload[4:])
                        payload = payload[:4] + body
                        log.debug("rewrote ApiVersions response corr=%d", corr)
                    except (ValueError, struct.error, IndexError) as e:
                        log.info("ApiVersions response corr=%d left as is: %s", corr, e)
            writer.write(struct.pack(">i", len(payload)) + payload)
            await writer.drain()
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()
    except (ConnectionError, OSError) as e:
        log.debug("%s: %s", direction, e)
        writer.close()


async def handle(client_r, client_w, upstream: tuple[str, int]) -> None:
    peer = client_w.get_extra_info("peername")
    task = asyncio.current_task()
    connections.add(task)
    task.add_done_callback(connections.discard)
    try:
        up_r, up_w = await asyncio.open_connection(*upstream)
    except OSError as e:
        log.warning("%s: cannot reach upstream %s:%d: %s", peer, *upstream, e)
        client_w.close()
        return
    log.debug("%s: connected", peer)
    pending: set[int] = set()
    try:
        results = await asyncio.gather(pump(client_r, up_w, "request", pending),
                                       pump(up_r, client_w, "response", pending),
                                       return_exceptions=True)
        for r in results:  # never let one connection take the proxy down
            if isinstance(r, BaseException):
                log.error("%s: connection failed: %r", peer, r)
    finally:
        for w in (up_w, client_w):
            w.close()
            try:
                await w.wait_closed()
            except (ConnectionError, OSError):
                pass
        log.debug("%s: closed", peer)


def host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, type=host_port, help="HOST:PORT to listen on")
    ap.add_argument("--upstream", required=True, type=host_port, help="broker HOST:PORT")
    ap.add_argument("--tls-cert", help="PEM certificate (chain): the listener speaks TLS")
    ap.add_argument("--tls-key", help="PEM key of --tls-cert")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    tls = None
    if args.tls_cert or args.tls_key:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    server = await asyncio.start_server(lambda r, w: handle(r, w, args.upstream),
                                        *args.listen, reuse_address=True, ssl=tls)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    log.info("listening on %s:%d%s, upstream %s:%d", *args.listen, " (TLS)" if tls else "", *args.upstream)
    async with server:
        await stop.wait()
    log.info("stopped")


if __name__ == "__main__":
    asyncio.run(main())
