import NIOCore
import NIOHPACK
import NIOHTTP2

/// Serves one HTTP/2 stream (one push request): collects HEADERS and DATA until the client ends
/// the stream, asks the server for the answer and writes it back.
final class APNSStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private let server: MockAPNSServer
    private var requestHeaders: HPACKHeaders?
    /// The first ``MockAPNSServer/maximumKeptPayloadBytes`` bytes of the body.
    private var keptPayload: ByteBuffer?
    /// The full body length, also counting bytes beyond what is kept.
    private var payloadLength = 0
    private var hasAnswered = false

    init(server: MockAPNSServer) {
        self.server = server
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .headers(let headers):
            // A second HEADERS frame would be trailers, which APNs does not use: ignored.
            if self.requestHeaders == nil { self.requestHeaders = headers.headers }
            if headers.endStream { self.answer(context: context) }
        case .data(let data):
            if case .byteBuffer(let buffer) = data.data { self.keep(buffer) }
            if data.endStream { self.answer(context: context) }
        default:
            break
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
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

    private func answer(context: ChannelHandlerContext) {
        guard !self.hasAnswered, let requestHeaders = self.requestHeaders else { return }
        self.hasAnswered = true

        let answer = self.server.answer(
            headers: requestHeaders,
            payload: self.keptPayload ?? ByteBuffer(),
            payloadLength: self.payloadLength
        )

        var responseHeaders = HPACKHeaders()
        responseHeaders.add(name: ":status", value: String(answer.status))
        // Unique per response: indexing it would only churn the HPACK dynamic table.
        responseHeaders.add(name: "apns-id", value: answer.apnsID, indexing: .nonIndexable)
        guard let body = answer.jsonBody else {
            context.writeAndFlush(
                self.wrapOutboundOut(.headers(.init(headers: responseHeaders, endStream: true))),
                promise: nil
            )
            return
        }
        let bodyBuffer = context.channel.allocator.buffer(string: body)
        responseHeaders.add(name: "content-type", value: "application/json; charset=utf-8")
        responseHeaders.add(name: "content-length", value: String(bodyBuffer.readableBytes))
        context.write(self.wrapOutboundOut(.headers(.init(headers: responseHeaders))), promise: nil)
        context.writeAndFlush(
            self.wrapOutboundOut(.data(.init(data: .byteBuffer(bodyBuffer), endStream: true))),
            promise: nil
        )
    }
}

/// Closes a connection on any error that reaches the end of its pipeline (TLS or HTTP/2 failures).
final class CloseOnErrorHandler: ChannelInboundHandler {
    typealias InboundIn = Never

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
