import MockServerSupport
import NIOCore
import NIOHPACK
import NIOHTTP2

/// Serves one connection's requests, one HTTP/2 stream each: collects a stream's HEADERS and DATA
/// until the client ends it, waits out any injected latency, asks the server for the answer and
/// writes it back; also counts the requests for the GOAWAY fault.
///
/// Streams are handled here, as frames carrying their stream id, rather than as NIOHTTP2 child
/// channels with an HTTP/1 codec each, as the mock APNs does: a channel and pipeline per stream
/// cost much of the mock's CPU per answer, and the mock shares the benchmarks' two cores with
/// Herald (BENCHMARKS.md). Answers written while a read is processed are flushed together when it
/// ends. Without child channels nothing else returns the flow-control windows, so this handler does.
final class MockFCMConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// The largest request body kept; a larger one is refused as too big anyway.
    static let maximumBodyBytes = 64 * 1024
    /// The connection's receive window, far above one stream's, so many concurrent requests are
    /// not throttled by flow control.
    static let connectionWindowSize = 8 * 1024 * 1024

    /// A stream whose request counts as in flight until it closes.
    private struct Stream {
        var headers: HPACKHeaders
        var body: [UInt8] = []
        var window = HTTP2ReceiveWindow(size: HTTP2ReceiveWindow.protocolDefaultSize, initial: HTTP2ReceiveWindow.protocolDefaultSize)
        /// The request is complete and counted (in flight until the stream closes).
        var counted = false
        /// The complete request waits for its injected latency.
        var timer: Scheduled<Void>?
    }

    private let server: MockFCMServer
    private let goAwayAfter: Int?
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var connectionWindow = HTTP2ReceiveWindow(size: MockFCMConnectionHandler.connectionWindowSize, initial: HTTP2ReceiveWindow.protocolDefaultSize)
    private var highestStreamID: HTTP2StreamID = .rootStream
    private var requestsSeen = 0
    private var inFlight = 0
    private var goAwaySent = false
    /// Frames were written during the current read and wait for its end to be flushed.
    private var needsFlush = false

    init(server: MockFCMServer, goAwayAfter: Int?) {
        self.server = server
        self.goAwayAfter = goAwayAfter
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let streamID = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            // A second HEADERS frame would be trailers, which FCM requests do not use: ignored.
            if streams[streamID] == nil {
                if streamID > highestStreamID { highestStreamID = streamID }
                streams[streamID] = Stream(headers: headers.headers)
            }
            if headers.endStream { requestComplete(streamID, context: context) }
        case .data(let data):
            consumeWindow(streamID, data: data, context: context)
            if case .byteBuffer(let buffer) = data.data, let kept = streams[streamID]?.body.count, kept + buffer.readableBytes <= Self.maximumBodyBytes {
                streams[streamID]?.body.append(contentsOf: buffer.readableBytesView)
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
        // Answered, or reset by the client (say at its deadline) before its answer: a request
        // still waiting for its latency is then never processed.
        if let closed = event as? StreamClosedEvent, let stream = streams.removeValue(forKey: closed.streamID) {
            finish(stream, context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        let open = streams
        streams = [:]
        for stream in open.values { finish(stream, context: context) }
        context.fireChannelInactive()
    }

    /// Takes a DATA frame's bytes off the windows and opens them again once half is used.
    private func consumeWindow(_ streamID: HTTP2StreamID, data: HTTP2Frame.FramePayload.Data, context: ChannelHandlerContext) {
        let length = HTTP2ReceiveWindow.flowControlledLength(data)
        guard length > 0 else { return }
        if let increment = connectionWindow.consume(length) {
            writeWindowUpdate(.rootStream, increment: increment, context: context)
        }
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

    /// A request is complete: counted, then answered now or after the injected latency.
    private func requestComplete(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = streams[streamID], !stream.counted else { return }
        streams[streamID]?.counted = true
        requestArrived(context: context)
        guard let latency = server.currentLatency, latency > .zero else {
            answer(streamID, context: context)
            return
        }
        streams[streamID]?.timer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(latency)) {
            self.streams[streamID]?.timer = nil
            self.answer(streamID, context: context)
            self.needsFlush = false
            context.flush()
        }
    }

    /// After the configured count this sends GOAWAY naming the highest stream opened so far:
    /// those streams are answered, the client resends later ones elsewhere.
    private func requestArrived(context: ChannelHandlerContext) {
        requestsSeen += 1
        inFlight += 1
        if let goAwayAfter, requestsSeen == goAwayAfter, !goAwaySent {
            goAwaySent = true
            let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: nil))
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        }
    }

    /// A stream closed; a counted request was answered or abandoned, and after GOAWAY the last
    /// one closes the connection.
    private func finish(_ stream: Stream, context: ChannelHandlerContext) {
        stream.timer?.cancel()
        guard stream.counted else { return }
        inFlight -= 1
        if goAwaySent, inFlight == 0 {
            let channel = context.channel
            channel.eventLoop.scheduleTask(in: .milliseconds(50)) { channel.close(promise: nil) }
        }
    }

    /// Decides the answer and writes it; flushed at the end of the read (or by the caller).
    private func answer(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = streams[streamID] else { return }
        streams[streamID]?.body = []
        let headers = stream.headers
        let answer = server.answer(
            method: headers.first(name: ":method") ?? "",
            path: headers.first(name: ":path") ?? "",
            authority: headers.first(name: ":authority") ?? headers.first(name: "host"),
            authorization: headers.first(name: "authorization"),
            metadataFlavor: headers.first(name: "metadata-flavor"),
            body: stream.body
        )
        let body = context.channel.allocator.buffer(string: answer.body)
        var responseHeaders = HPACKHeaders()
        responseHeaders.add(name: ":status", value: String(answer.status))
        responseHeaders.add(name: "content-type", value: answer.contentType)
        responseHeaders.add(name: "content-length", value: String(body.readableBytes))
        for (name, value) in answer.headers { responseHeaders.add(name: name, value: value) }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: responseHeaders)))), promise: nil)
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))), promise: nil)
        needsFlush = true
    }
}
