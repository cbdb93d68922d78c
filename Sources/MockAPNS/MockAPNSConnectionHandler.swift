import MockServerSupport
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL

/// Serves one connection's push requests, one HTTP/2 stream each: collects a stream's HEADERS and
/// DATA until the client ends it, waits out any injected latency, asks the server for the answer
/// and writes it back.
///
/// Streams are handled here, as frames carrying their stream id, rather than as NIOHTTP2 child
/// channels: a channel and pipeline per stream cost much of the mock's CPU per answer, and
/// the mock shares the benchmarks' two cores with Herald (BENCHMARKS.md, "A mock that answers at
/// once"). Answers written while a read is processed are flushed together when it ends. Without
/// child channels nothing else returns the flow-control windows, so this handler does.
final class MockAPNSConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// The SETTINGS_INITIAL_WINDOW_SIZE the server advertises: each stream's receive window.
    static let streamWindowSize = 65_535
    /// The connection's receive window, far above one stream's, so many concurrent pushes are not
    /// throttled by flow control (payloads are at most 5 KiB each).
    static let connectionWindowSize = 8 * 1024 * 1024

    private enum Phase {
        /// The request is being received.
        case receiving
        /// The request is complete and waits for its injected latency.
        case delayed(Scheduled<Void>)
        /// Above a GOAWAY's last stream id: never processed or answered.
        case ignored
    }

    /// A stream whose answer is not written yet.
    private struct Stream {
        var phase: Phase
        var headers: HPACKHeaders
        /// The first ``MockAPNSServer/maximumKeptPayloadBytes`` bytes of the body.
        var keptPayload: ByteBuffer?
        /// The full body length, also counting bytes beyond what is kept.
        var payloadLength = 0
        /// The stream's receive window.
        var window = HTTP2ReceiveWindow(size: MockAPNSConnectionHandler.streamWindowSize, initial: MockAPNSConnectionHandler.streamWindowSize)

        mutating func keep(_ buffer: ByteBuffer) {
            var buffer = buffer
            self.payloadLength += buffer.readableBytes
            let room = MockAPNSServer.maximumKeptPayloadBytes - (self.keptPayload?.readableBytes ?? 0)
            guard room > 0, let slice = buffer.readSlice(length: min(room, buffer.readableBytes)) else { return }
            if var kept = self.keptPayload {
                // Release the stored reference first so the append below does not copy the bytes.
                self.keptPayload = nil
                kept.writeImmutableBuffer(slice)
                self.keptPayload = kept
            } else {
                // The common case (one DATA frame): keep a slice of the inbound buffer, no copy.
                self.keptPayload = slice
            }
        }
    }

    private let server: MockAPNSServer
    private let connection: MockConnectionState
    private var streams: [HTTP2StreamID: Stream] = [:]
    /// The connection's receive window.
    private var connectionWindow = HTTP2ReceiveWindow(size: MockAPNSConnectionHandler.connectionWindowSize, initial: HTTP2ReceiveWindow.protocolDefaultSize)
    /// Frames were written during the current read and wait for its end to be flushed.
    private var needsFlush = false
    /// Whether the connection authenticated with a client certificate; read at its first request.
    private var certificateAuthenticated: Bool?

    init(server: MockAPNSServer, connection: MockConnectionState) {
        self.server = server
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        let streamID = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            // A second HEADERS frame would be trailers, which APNs does not use: ignored.
            if self.streams[streamID] == nil {
                self.start(streamID, headers: headers.headers)
            }
            if headers.endStream { self.requestComplete(streamID, context: context) }
        case .data(let data):
            self.consumeWindow(streamID, data: data, context: context)
            if case .byteBuffer(let buffer) = data.data { self.streams[streamID]?.keep(buffer) }
            if data.endStream { self.requestComplete(streamID, context: context) }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if self.needsFlush {
            self.needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // A stream closed before its answer: reset by the client (say at its deadline) or by
        // NIOHTTP2 after an error. The request was never processed.
        if let closed = event as? StreamClosedEvent, let stream = self.streams.removeValue(forKey: closed.streamID) {
            self.abandon(stream)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        // The connection is gone: no stream left unanswered will ever be answered.
        let open = self.streams
        self.streams = [:]
        for stream in open.values { self.abandon(stream) }
        context.fireChannelInactive()
    }

    private func start(_ streamID: HTTP2StreamID, headers: HPACKHeaders) {
        // Counted when its HEADERS arrive, so the GOAWAY after the Nth stream precedes as few
        // later streams as possible.
        if self.connection.requestArrived(streamID: streamID) {
            self.streams[streamID] = Stream(phase: .receiving, headers: headers)
        } else {
            self.streams[streamID] = Stream(phase: .ignored, headers: headers)
            self.server.recordUnansweredRequest()
        }
    }

    /// Counts a started stream that closed unanswered; an ignored one was counted when it started.
    private func abandon(_ stream: Stream) {
        switch stream.phase {
        case .ignored:
            return
        case .delayed(let timer):
            timer.cancel()
        case .receiving:
            break
        }
        self.connection.requestFinished(status: nil)
        self.server.recordUnansweredRequest()
    }

    /// Takes a DATA frame's bytes off the windows and opens them again once half is used.
    private func consumeWindow(_ streamID: HTTP2StreamID, data: HTTP2Frame.FramePayload.Data, context: ChannelHandlerContext) {
        let length = HTTP2ReceiveWindow.flowControlledLength(data)
        guard length > 0 else { return }
        if let increment = self.connectionWindow.consume(length) {
            self.writeWindowUpdate(.rootStream, increment: increment, context: context)
        }
        guard !data.endStream, var stream = self.streams[streamID] else { return }
        if let increment = stream.window.consume(length) {
            self.writeWindowUpdate(streamID, increment: increment, context: context)
        }
        self.streams[streamID] = stream
    }

    private func writeWindowUpdate(_ streamID: HTTP2StreamID, increment: Int, context: ChannelHandlerContext) {
        context.write(self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
        self.needsFlush = true
    }

    private func requestComplete(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = self.streams[streamID], case .receiving = stream.phase else { return }
        guard let delay = self.server.addedLatency(headers: stream.headers) else {
            self.answer(streamID, context: context)
            return
        }
        let timer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) {
            self.answer(streamID, context: context)
            self.needsFlush = false
            context.flush()
        }
        self.streams[streamID]?.phase = .delayed(timer)
    }

    /// Whether the connection presented a (verified) client certificate.
    private func presentedCertificate(_ context: ChannelHandlerContext) -> Bool {
        if let known = self.certificateAuthenticated { return known }
        let tls = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
        let presented = tls?.peerCertificate != nil
        self.certificateAuthenticated = presented
        return presented
    }

    /// Decides the answer and writes it; flushed at the end of the read (or by the caller).
    private func answer(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = self.streams.removeValue(forKey: streamID) else { return }
        let answer = self.server.answer(
            headers: stream.headers,
            payload: stream.keptPayload ?? ByteBuffer(),
            payloadLength: stream.payloadLength,
            certificateAuthenticated: self.server.acceptsBothKindsOfProvider && self.presentedCertificate(context)
        )

        var responseHeaders = HPACKHeaders()
        responseHeaders.add(name: ":status", value: String(answer.status))
        // Unique per response: indexing it would only churn the HPACK dynamic table.
        responseHeaders.add(name: answer.echoesRequestID ? "apns-request-id" : "apns-id", value: answer.apnsID, indexing: .nonIndexable)
        for (name, value) in answer.headers {
            responseHeaders.add(name: name, value: value, indexing: .nonIndexable)
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        if let body = answer.jsonBody {
            let bodyBuffer = context.channel.allocator.buffer(string: body)
            responseHeaders.add(name: "content-type", value: "application/json; charset=utf-8")
            responseHeaders.add(name: "content-length", value: String(bodyBuffer.readableBytes))
            context.write(self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: responseHeaders)))), promise: nil)
            let data = HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(bodyBuffer), endStream: true))
            context.write(self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: data)), promise: written)
        } else {
            let headers = HTTP2Frame.FramePayload.headers(.init(headers: responseHeaders, endStream: true))
            context.write(self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: headers)), promise: written)
        }
        self.needsFlush = true
        // Reported once the answer left, so a connection draining after GOAWAY closes only then.
        let connection = self.connection
        let status = answer.status
        written.futureResult.assumeIsolated().whenComplete { _ in
            connection.requestFinished(status: status)
        }
    }
}

/// Closes a connection on errors that reach the end of its pipeline (TLS or HTTP/2 failures),
/// except those that concern one stream: NIOHTTP2 already reset that stream, and the
/// connection's other streams go on.
final class CloseOnErrorHandler: ChannelInboundHandler {
    typealias InboundIn = Never

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.StreamError { return }
        context.close(promise: nil)
    }
}
