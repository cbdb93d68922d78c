import MockServerSupport
import NIOCore
import NIOHPACK
import NIOHTTP2

/// Serves one connection's requests, one HTTP/2 stream each: collects a stream's HEADERS and DATA
/// until the client ends it, waits out any configured delay, asks the server for the answer and
/// writes it back.
///
/// Streams are handled here, as frames carrying their stream id, rather than as NIOHTTP2 child
/// channels, as the mock FCM does and for its reason: a channel and pipeline per stream cost
/// much of a mock's CPU per answer, and the mocks share the benchmarks' cores with Herald. Answers
/// written while a read is processed are flushed together when it ends. Without child channels
/// nothing else returns the flow-control windows, so this handler does.
final class MockWebPushConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE): the protocol's default.
    static let streamWindowSize = HTTP2ReceiveWindow.protocolDefaultSize
    /// The connection's receive window, far above one stream's, so many concurrent requests are
    /// not throttled by flow control.
    static let connectionWindowSize = 8 * 1024 * 1024

    /// A stream whose answer is not written yet.
    private struct Stream {
        var headers: HPACKHeaders
        var body: [UInt8] = []
        var bodyLength = 0
        var window = HTTP2ReceiveWindow(size: MockWebPushConnectionHandler.streamWindowSize, initial: MockWebPushConnectionHandler.streamWindowSize)
        /// The request is complete (its answer is written or waits for the delay).
        var complete = false
        /// The complete request waits for the configured delay.
        var timer: Scheduled<Void>?
    }

    private let server: MockWebPushServer
    private let origin: String
    private let maximumBodyBytes: Int
    private let delay: TimeAmount?
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var connectionWindow = HTTP2ReceiveWindow(size: MockWebPushConnectionHandler.connectionWindowSize, initial: HTTP2ReceiveWindow.protocolDefaultSize)
    /// Frames were written during the current read and wait for its end to be flushed.
    private var needsFlush = false

    init(server: MockWebPushServer, origin: String) {
        self.server = server
        self.origin = origin
        self.maximumBodyBytes = server.configuration.maximumBodyBytes
        let delay = server.configuration.answerDelayMilliseconds
        self.delay = delay > 0 ? .milliseconds(Int64(delay)) : nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let streamID = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            // A second HEADERS frame would be trailers, which push requests do not use: ignored.
            if streams[streamID] == nil { streams[streamID] = Stream(headers: headers.headers) }
            if headers.endStream { requestComplete(streamID, context: context) }
        case .data(let data):
            consumeWindow(streamID, data: data, context: context)
            if case .byteBuffer(let buffer) = data.data, var stream = streams[streamID] {
                // Only the length of a body over the limit matters (it is answered 413).
                stream.bodyLength += buffer.readableBytes
                if stream.bodyLength <= maximumBodyBytes { stream.body.append(contentsOf: buffer.readableBytesView) }
                streams[streamID] = stream
            }
            if data.endStream { requestComplete(streamID, context: context) }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Answered, or reset by the client before its answer: a request still waiting for its
        // delay is then never processed.
        if let closed = event as? StreamClosedEvent, let stream = streams.removeValue(forKey: closed.streamID) {
            stream.timer?.cancel()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        for stream in streams.values { stream.timer?.cancel() }
        streams = [:]
        context.fireChannelInactive()
    }

    /// Takes a DATA frame's bytes off the windows and opens them again once half is used.
    private func consumeWindow(_ streamID: HTTP2StreamID, data: HTTP2Frame.FramePayload.Data, context: ChannelHandlerContext) {
        let length = HTTP2ReceiveWindow.flowControlledLength(data)
        guard length > 0 else { return }
        if let increment = connectionWindow.consume(length) {
            writeWindowUpdate(.rootStream, increment: increment, context: context)
        }
        // The stream's last frame needs no update: the stream is closed for the client.
        guard !data.endStream, var stream = streams[streamID] else { return }
        if let increment = stream.window.consume(length) {
            writeWindowUpdate(streamID, increment: increment, context: context)
        }
        streams[streamID] = stream
    }

    private func writeWindowUpdate(_ streamID: HTTP2StreamID, increment: Int, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
        needsFlush = true
    }

    /// A request is complete: answered now or after the configured delay.
    private func requestComplete(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = streams[streamID], !stream.complete else { return }
        streams[streamID]?.complete = true
        guard let delay else {
            answer(streamID, context: context)
            return
        }
        streams[streamID]?.timer = context.eventLoop.assumeIsolated().scheduleTask(in: delay) {
            self.streams[streamID]?.timer = nil
            self.answer(streamID, context: context)
            self.needsFlush = false
            context.flush()
        }
    }

    /// Decides the answer and writes it; flushed at the end of the read (or by the caller).
    private func answer(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = streams[streamID] else { return }
        streams[streamID]?.body = []
        let reply = server.answer(
            MockWebPushServer.Request(
                method: stream.headers.first(name: ":method") ?? "",
                path: stream.headers.first(name: ":path") ?? "",
                origin: origin,
                headers: stream.headers,
                body: stream.body,
                bodyLength: stream.bodyLength
            )
        )
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(reply.status))
        headers.add(name: "content-length", value: String(reply.body.count))
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        let endsWithHeaders = reply.body.isEmpty
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: endsWithHeaders)))), promise: nil)
        if !endsWithHeaders {
            let body = context.channel.allocator.buffer(bytes: reply.body)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
        }
        needsFlush = true
    }
}
