import NIOCore
import NIOHTTP1
import NIOHTTP2

/// One connection's GOAWAY countdown and the streams it still owes answers; used only on the
/// connection's event loop.
final class MockFCMConnection {
    private let channel: any Channel
    private let goAwayAfter: Int?
    private var highestStreamID: HTTP2StreamID = .rootStream
    private var requestsSeen = 0
    private var inFlight = 0
    private var goAwaySent = false

    init(channel: any Channel, goAwayAfter: Int?) {
        self.channel = channel
        self.goAwayAfter = goAwayAfter
    }

    func streamOpened(_ streamID: HTTP2StreamID?) {
        if let streamID, streamID > highestStreamID { highestStreamID = streamID }
    }

    /// A request is complete; after the configured count this sends GOAWAY naming the highest
    /// stream opened so far: those streams are answered, the client resends later ones elsewhere.
    func requestArrived() {
        requestsSeen += 1
        inFlight += 1
        if let goAwayAfter, requestsSeen == goAwayAfter, !goAwaySent {
            goAwaySent = true
            let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: nil))
            channel.writeAndFlush(frame, promise: nil)
        }
    }

    /// A request was answered or abandoned; after GOAWAY the last one closes the connection.
    func requestFinished() {
        inFlight -= 1
        if goAwaySent, inFlight == 0 {
            let channel = self.channel
            channel.eventLoop.scheduleTask(in: .milliseconds(50)) { channel.close(promise: nil) }
        }
    }
}

/// Serves one HTTP/2 stream: collects the request, waits out any injected latency, asks the
/// server for the answer and writes it.
final class MockFCMStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// The largest request body kept; a larger one is refused as too big anyway.
    static let maximumBodyBytes = 64 * 1024

    private let server: MockFCMServer
    private let connection: MockFCMConnection
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var counted = false

    init(server: MockFCMServer, connection: MockFCMConnection, streamID: HTTP2StreamID?) {
        self.server = server
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body(let buffer):
            if body.count + buffer.readableBytes <= Self.maximumBodyBytes { body += buffer.readableBytesView }
        case .end:
            counted = true
            connection.requestArrived()
            guard let latency = server.currentLatency, latency > .zero else {
                respond(context: context)
                return
            }
            context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(latency)) {
                // A stream the client reset meanwhile (at its deadline) is never processed.
                guard context.channel.isActive else { return }
                self.respond(context: context)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if counted {
            counted = false
            connection.requestFinished()
        }
        context.fireChannelInactive()
    }

    private func respond(context: ChannelHandlerContext) {
        guard let head else { return }
        let answer = server.answer(method: head.method, path: head.uri, headers: head.headers, body: body)
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: answer.contentType)
        headers.add(name: "content-length", value: String(answer.body.utf8.count))
        for (name, value) in answer.headers { headers.add(name: name, value: value) }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http2, status: .init(statusCode: answer.status), headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: answer.body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}
