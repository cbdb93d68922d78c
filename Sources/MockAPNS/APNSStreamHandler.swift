import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL

/// Serves one HTTP/2 stream (one push request): collects HEADERS and DATA until the client ends
/// the stream, waits out any injected latency, asks the server for the answer and writes it back.
final class APNSStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private enum Phase {
        /// Waiting for the request's first HEADERS.
        case idle
        /// The request is being received or waits for its injected latency.
        case started
        /// Above a GOAWAY's last stream id: never processed or answered.
        case ignored
        /// The answer was decided (and is being written), or the stream closed unanswered.
        case finished
    }

    private let server: MockAPNSServer
    private let connection: NIOLoopBound<MockConnectionState>
    private var phase = Phase.idle
    private var requestHeaders: HPACKHeaders?
    /// The first ``MockAPNSServer/maximumKeptPayloadBytes`` bytes of the body.
    private var keptPayload: ByteBuffer?
    /// The full body length, also counting bytes beyond what is kept.
    private var payloadLength = 0
    private var latencyTimer: Scheduled<Void>?

    init(server: MockAPNSServer, connection: NIOLoopBound<MockConnectionState>) {
        self.server = server
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .headers(let headers):
            // A second HEADERS frame would be trailers, which APNs does not use: ignored.
            if self.requestHeaders == nil {
                self.requestHeaders = headers.headers
                self.start(context: context)
            }
            if headers.endStream { self.requestComplete(context: context) }
        case .data(let data):
            if case .byteBuffer(let buffer) = data.data { self.keep(buffer) }
            if data.endStream { self.requestComplete(context: context) }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        // The stream closed before an answer: reset by the client (say at its deadline) or dropped
        // with its connection. The request was never processed.
        if case .started = self.phase {
            self.phase = .finished
            self.latencyTimer?.cancel()
            self.latencyTimer = nil
            self.connection.value.requestFinished(status: nil)
            self.server.recordUnansweredRequest()
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func start(context: ChannelHandlerContext) {
        guard case .idle = self.phase else { return }
        let streamID = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
        if let streamID, !self.connection.value.requestStarted(streamID: streamID) {
            self.phase = .ignored
            self.server.recordUnansweredRequest()
        } else {
            self.phase = .started
        }
    }

    private func keep(_ buffer: ByteBuffer) {
        var buffer = buffer
        self.payloadLength += buffer.readableBytes
        let room = MockAPNSServer.maximumKeptPayloadBytes - (self.keptPayload?.readableBytes ?? 0)
        guard room > 0, let slice = buffer.readSlice(length: min(room, buffer.readableBytes)) else { return }
        if var kept = self.keptPayload {
            // Release our reference first so the append below does not copy the bytes.
            self.keptPayload = nil
            kept.writeImmutableBuffer(slice)
            self.keptPayload = kept
        } else {
            // The common case (one DATA frame): keep a slice of the inbound buffer, no copy.
            self.keptPayload = slice
        }
    }

    private func requestComplete(context: ChannelHandlerContext) {
        guard case .started = self.phase, self.latencyTimer == nil, let requestHeaders = self.requestHeaders else {
            return
        }
        guard let delay = self.server.addedLatency(headers: requestHeaders) else {
            self.answer(context: context)
            return
        }
        self.latencyTimer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) {
            self.latencyTimer = nil
            self.answer(context: context)
        }
    }

    /// Whether the stream's connection presented a (verified) client certificate.
    private static func presentedCertificate(_ streamChannel: any Channel) -> Bool {
        let tls = try? streamChannel.parent?.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
        return tls?.peerCertificate != nil
    }

    private func answer(context: ChannelHandlerContext) {
        guard case .started = self.phase, let requestHeaders = self.requestHeaders else { return }
        self.phase = .finished

        let answer = self.server.answer(
            headers: requestHeaders,
            payload: self.keptPayload ?? ByteBuffer(),
            payloadLength: self.payloadLength,
            certificateAuthenticated: self.server.acceptsBothKindsOfProvider && Self.presentedCertificate(context.channel)
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
            context.write(self.wrapOutboundOut(.headers(.init(headers: responseHeaders))), promise: nil)
            context.writeAndFlush(
                self.wrapOutboundOut(.data(.init(data: .byteBuffer(bodyBuffer), endStream: true))),
                promise: written
            )
        } else {
            context.writeAndFlush(
                self.wrapOutboundOut(.headers(.init(headers: responseHeaders, endStream: true))),
                promise: written
            )
        }
        // Reported once the answer left, so a connection draining after GOAWAY closes only then.
        let connection = self.connection
        let status = answer.status
        written.futureResult.assumeIsolated().whenComplete { _ in
            connection.value.requestFinished(status: status)
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
