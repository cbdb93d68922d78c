import APNSCore
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS

/// What a connection tells the pool about itself.
enum APNSConnectionEvent: Sendable {
    /// The server changed SETTINGS_MAX_CONCURRENT_STREAMS.
    case streamLimitChanged(Int)
    /// A GOAWAY arrived (or stream IDs ran out): the connection takes no new streams.
    case goingAway(errorCode: HTTP2ErrorCode, reason: String?)
    /// The connection closed.
    case closed
}

/// A request that was never written because its connection closed or began draining first;
/// the client retries it on another connection without counting an attempt.
struct APNSStreamNotOpened: Error {
    var transportError: APNSTransportError
}

/// APNs' answer on one stream and the provider token the request carried.
struct APNSStreamOutcome: Sendable {
    var response: APNSResponse
    var providerToken: String?
}

/// The one handler behind `NIOHTTP2Handler` on an APNs connection: it opens a stream per request
/// with explicit stream IDs (no child channel per stream), matches answers to callers, enforces
/// deadlines, drains on GOAWAY, returns inbound flow-control credit and pings idle connections.
///
/// All state lives on the channel's event loop; ``APNSConnection`` reaches it through `NIOLoopBound`.
final class APNSConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    struct Configuration: Sendable {
        var authority: String
        var handshakeTimeout: TimeAmount
        var pingInterval: TimeAmount
        var pingTimeout: TimeAmount
    }

    /// The stream limit assumed when the server's SETTINGS name none (RFC 9113: unlimited).
    static let streamLimitWhenUnlimited = 1000
    /// The connection-level receive window kept open (the HTTP/2 default).
    private static let connectionWindowTarget = 65_535
    /// Error bodies are tiny; anything beyond this is dropped.
    private static let maximumBodyBytes = 16 * 1024

    private enum Lifecycle {
        /// TLS and the server's first SETTINGS frame are outstanding; the promise carries the stream limit.
        case connecting(EventLoopPromise<Int>)
        case ready
        /// No new streams (GOAWAY or shutdown); closes once the last stream finished.
        case draining
        case closed
    }

    private struct PendingStream {
        let requestID: UInt64
        let continuation: CheckedContinuation<APNSStreamOutcome, any Error>
        let deadline: NIODeadline
        let providerToken: String?
        var status: Int?
        var apnsID: String?
        var body: ByteBuffer?
    }

    private struct Authorization {
        var token: String
        var headerValue: String
    }

    private let configuration: Configuration
    private let logger: Logger
    private let onEvent: @Sendable (APNSConnectionEvent) -> Void

    private var context: ChannelHandlerContext?
    private var lifecycle: Lifecycle
    private var streams: [HTTP2StreamID: PendingStream] = [:]
    private var nextStreamID: HTTP2StreamID = 1
    private var remoteStreamLimit = 1
    private var authorization: Authorization?
    private var headerIndexing = APNSRequestHeaders.IndexingState()
    private var flushScheduled = false

    private var handshakeTimer: Scheduled<Void>?
    private var deadlineTimer: (deadline: NIODeadline, task: Scheduled<Void>)?
    private var pingTimer: Scheduled<Void>?
    private var pingAckTimer: Scheduled<Void>?
    private var gracefulCloseTimer: Scheduled<Void>?
    private var receivedSinceLastPingCheck = false
    private var outstandingPing: HTTP2PingData?
    private var pingCounter: UInt64 = 0

    init(
        configuration: Configuration,
        providerToken: String?,
        readyPromise: EventLoopPromise<Int>,
        logger: Logger,
        onEvent: @escaping @Sendable (APNSConnectionEvent) -> Void
    ) {
        self.configuration = configuration
        self.lifecycle = .connecting(readyPromise)
        self.logger = logger
        self.onEvent = onEvent
        if let providerToken {
            self.authorization = Authorization(token: providerToken, headerValue: "bearer " + providerToken)
        }
    }

    // MARK: Calls from APNSConnection (on the event loop)

    /// Opens a stream for `request`; `continuation` is resumed exactly once with the answer or an error.
    func startStream(
        requestID: UInt64,
        request: APNSRequest,
        deadline: NIODeadline,
        continuation: CheckedContinuation<APNSStreamOutcome, any Error>
    ) {
        guard let context, case .ready = lifecycle else {
            continuation.resume(throwing: APNSStreamNotOpened(transportError: notSentError()))
            return
        }
        guard nextStreamID < HTTP2StreamID.maxID.advanced(by: -2) else {
            // Stream IDs ran out: behave as if the server sent GOAWAY so the pool replaces us.
            lifecycle = .draining
            onEvent(.goingAway(errorCode: .noError, reason: "stream IDs exhausted"))
            continuation.resume(
                throwing: APNSStreamNotOpened(
                    transportError: .streamReset("connection ran out of stream IDs; not sent")
                )
            )
            closeIfDrained()
            return
        }
        let streamID = nextStreamID
        nextStreamID = streamID.advanced(by: 2)

        let headers = APNSRequestHeaders.make(
            for: request,
            authority: configuration.authority,
            authorization: authorization?.headerValue,
            indexing: &headerIndexing
        )
        // Registered before writing: a synchronous write failure reports back through errorCaught.
        streams[streamID] = PendingStream(
            requestID: requestID,
            continuation: continuation,
            deadline: deadline,
            providerToken: authorization?.token
        )
        armDeadlineTimer(for: deadline)

        var body = context.channel.allocator.buffer(capacity: request.payload.count)
        body.writeBytes(request.payload)
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: false)))
            ),
            promise: nil
        )
        context.write(
            wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))
            ),
            promise: nil
        )
        scheduleFlush()
    }

    /// The caller's task was cancelled: reset its stream.
    func cancelStream(requestID: UInt64) {
        guard let streamID = streams.first(where: { $0.value.requestID == requestID })?.key else { return }
        reset(streamID)
        finish(streamID, with: .failure(CancellationError()))
    }

    /// Uses `token` for the `authorization` header of streams opened from now on.
    func installProviderToken(_ token: String) {
        authorization = Authorization(token: token, headerValue: "bearer " + token)
    }

    /// Stops taking streams and closes once in-flight streams finished or `timeout` passed.
    func closeGracefully(within timeout: TimeAmount) {
        switch lifecycle {
        case .closed:
            return
        case .connecting(let promise):
            lifecycle = .draining
            promise.fail(APNSTransportError.shuttingDown("client shut down while connecting"))
        case .ready, .draining:
            lifecycle = .draining
        }
        if streams.isEmpty {
            context?.close(promise: nil)
        } else if gracefulCloseTimer == nil, let context {
            gracefulCloseTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                self.context?.close(promise: nil)
            }
        }
    }

    // MARK: ChannelHandler

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: configuration.handshakeTimeout) {
            [self] in
            guard case .connecting = lifecycle else { return }
            failConnecting(APNSTransportError.connectionFailed("TLS/HTTP/2 handshake timed out"))
            self.context?.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // A channel that never became active (connection refused) sees no channelInactive.
        failConnecting(APNSTransportError.connectionFailed("connection closed during the handshake"))
        lifecycle = .closed
        cancelTimers()
        let pending = streams
        streams = [:]
        for stream in pending.values {
            stream.continuation.resume(throwing: APNSTransportError.connectionFailed("connection handler removed"))
        }
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        receivedSinceLastPingCheck = true
        switch frame.payload {
        case .headers(let headers):
            receivedHeaders(headers, on: frame.streamID)
        case .data(let data):
            receivedData(data, on: frame.streamID)
        case .rstStream(let code):
            finish(frame.streamID, with: .failure(APNSTransportError.streamReset("APNs reset the stream (\(code))")))
        case .settings(.settings(let settings)):
            receivedSettings(settings)
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            receivedGoAway(lastStreamID: lastStreamID, errorCode: errorCode, debugData: opaqueData)
        case .ping(let data, ack: true):
            if data == outstandingPing {
                outstandingPing = nil
                pingAckTimer?.cancel()
                pingAckTimer = nil
            }
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent {
            if window.streamID == .rootStream, let inbound = window.inboundWindowSize {
                connectionWindowChanged(inboundWindowSize: inbound)
            }
        } else if let closed = event as? StreamClosedEvent {
            if streams[closed.streamID] != nil {
                let reason = closed.reason.map { "\($0)" } ?? "no reason"
                finish(
                    closed.streamID,
                    with: .failure(APNSTransportError.streamReset("stream closed before the answer (\(reason))"))
                )
            }
        } else if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent,
            negotiated != "h2"
        {
            failConnecting(
                APNSTransportError.connectionFailed("server did not negotiate HTTP/2 (ALPN: \(negotiated ?? "none"))")
            )
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            finish(
                streamError.streamID,
                with: .failure(APNSTransportError.streamReset("HTTP/2 stream error: \(streamError.baseError)"))
            )
            return
        }
        logger.debug("APNs connection error", metadata: [APNSLoggingKeys.error: "\(error)"])
        failConnecting(APNSTransportError.connectionFailed("\(error)"))
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failConnecting(APNSTransportError.connectionFailed("connection closed during the handshake"))
        let wasOpen: Bool
        if case .closed = lifecycle { wasOpen = false } else { wasOpen = true }
        lifecycle = .closed
        cancelTimers()
        let pending = streams
        streams = [:]
        for stream in pending.values {
            stream.continuation.resume(
                throwing: APNSTransportError.connectionFailed("connection to APNs closed before the answer")
            )
        }
        if wasOpen { onEvent(.closed) }
        context.fireChannelInactive()
    }

    // MARK: Inbound frames

    private func receivedHeaders(_ payload: HTTP2Frame.FramePayload.Headers, on streamID: HTTP2StreamID) {
        guard streams[streamID] != nil else { return }
        var status: Int?
        var apnsID: String?
        for header in payload.headers {
            if header.name == ":status" {
                status = Int(header.value)
            } else if header.name == "apns-id" {
                apnsID = header.value
            }
        }
        if let status {
            if (100..<200).contains(status) { return }  // informational; the real answer follows
            streams[streamID]!.status = status
            streams[streamID]!.apnsID = apnsID
        }
        if payload.endStream { complete(streamID) }
    }

    private func receivedData(_ payload: HTTP2Frame.FramePayload.Data, on streamID: HTTP2StreamID) {
        guard case .byteBuffer(let bytes) = payload.data else { return }
        if streams[streamID] != nil {
            if streams[streamID]!.body == nil {
                streams[streamID]!.body = bytes
            } else if streams[streamID]!.body!.readableBytes + bytes.readableBytes <= Self.maximumBodyBytes {
                streams[streamID]!.body!.writeImmutableBuffer(bytes)
            }
        }
        if payload.endStream { complete(streamID) }
    }

    /// Without a stream multiplexer nobody else sends connection-level WINDOW_UPDATEs. NIOHTTP2
    /// reports the connection's receive window after every DATA frame (also frames it drops, for
    /// example on a stream reset at its deadline, which still consume window); once half of it is
    /// used, the credit is returned. Stream windows need no care: an answer is a few hundred bytes.
    private func connectionWindowChanged(inboundWindowSize: Int) {
        guard inboundWindowSize <= Self.connectionWindowTarget / 2, let context else { return }
        let increment = Self.connectionWindowTarget - inboundWindowSize
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
            promise: nil
        )
        scheduleFlush()
    }

    private func receivedSettings(_ settings: HTTP2Settings) {
        var limit: Int?
        for setting in settings where setting.parameter == .maxConcurrentStreams {
            limit = setting.value
        }
        switch lifecycle {
        case .connecting(let promise):
            remoteStreamLimit = limit ?? Self.streamLimitWhenUnlimited
            lifecycle = .ready
            handshakeTimer?.cancel()
            handshakeTimer = nil
            schedulePingCheck()
            promise.succeed(remoteStreamLimit)
        case .ready, .draining:
            if let limit, limit != remoteStreamLimit {
                remoteStreamLimit = limit
                onEvent(.streamLimitChanged(limit))
            }
        case .closed:
            break
        }
    }

    private func receivedGoAway(lastStreamID: HTTP2StreamID, errorCode: HTTP2ErrorCode, debugData: ByteBuffer?) {
        let reason = debugData.flatMap { APNSResponseBody(parsing: $0).reason }
        switch lifecycle {
        case .connecting:
            failConnecting(
                APNSTransportError.connectionFailed("GOAWAY during the handshake (\(reason ?? "\(errorCode)"))")
            )
            lifecycle = .draining
        case .ready:
            lifecycle = .draining
        case .draining, .closed:
            break
        }
        // Streams above the last stream ID were never processed: fail them so callers retry elsewhere.
        let refused = streams.keys.filter { $0 > lastStreamID }
        for streamID in refused {
            finish(
                streamID,
                with: .failure(
                    APNSTransportError.streamReset(
                        "GOAWAY (\(reason ?? "\(errorCode)")): APNs did not process the stream"
                    )
                )
            )
        }
        onEvent(.goingAway(errorCode: errorCode, reason: reason))
        closeIfDrained()
    }

    // MARK: Completing streams

    private func complete(_ streamID: HTTP2StreamID) {
        guard let stream = streams[streamID] else { return }
        guard let status = stream.status else {
            finish(streamID, with: .failure(APNSTransportError.streamReset("APNs ended the stream without a status")))
            return
        }
        var response = APNSResponse(status: status, apnsID: stream.apnsID)
        if status != 200, let body = stream.body, body.readableBytes > 0 {
            let parsed = APNSResponseBody(parsing: body)
            response.reason = parsed.reason.map(APNSReason.init)
            response.timestampMilliseconds = parsed.timestampMilliseconds
        }
        finish(streamID, with: .success(APNSStreamOutcome(response: response, providerToken: stream.providerToken)))
    }

    private func finish(_ streamID: HTTP2StreamID, with result: Result<APNSStreamOutcome, any Error>) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.continuation.resume(with: result)
        closeIfDrained()
    }

    private func closeIfDrained() {
        guard case .draining = lifecycle, streams.isEmpty else { return }
        context?.close(promise: nil)
    }

    private func reset(_ streamID: HTTP2StreamID) {
        guard let context else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        scheduleFlush()
    }

    private func notSentError() -> APNSTransportError {
        switch lifecycle {
        case .draining: .streamReset("connection is draining; request not sent")
        case .connecting, .ready, .closed: .connectionFailed("connection closed; request not sent")
        }
    }

    private func failConnecting(_ error: any Error) {
        guard case .connecting(let promise) = lifecycle else { return }
        lifecycle = .draining
        promise.fail(error)
    }

    // MARK: Timers

    /// One timer per connection, armed for the earliest deadline; when it fires it expires every
    /// stream past its deadline and re-arms for the next. Requests arriving with later deadlines
    /// (the usual case) cost no timer work at all.
    private func armDeadlineTimer(for deadline: NIODeadline) {
        if let armed = deadlineTimer {
            if armed.deadline <= deadline { return }
            armed.task.cancel()
        }
        guard let context else { return }
        let task = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            self.deadlineTimerFired()
        }
        deadlineTimer = (deadline, task)
    }

    private func deadlineTimerFired() {
        deadlineTimer = nil
        guard let context else { return }
        let now = context.eventLoop.now
        var expired: [HTTP2StreamID] = []
        var nextDeadline: NIODeadline?
        for (streamID, stream) in streams {
            if stream.deadline <= now {
                expired.append(streamID)
            } else if nextDeadline.map({ stream.deadline < $0 }) ?? true {
                nextDeadline = stream.deadline
            }
        }
        for streamID in expired {
            reset(streamID)
            finish(
                streamID,
                with: .failure(APNSTransportError.deadlineExceeded("no answer from APNs before the deadline"))
            )
        }
        if let nextDeadline { armDeadlineTimer(for: nextDeadline) }
    }

    private func schedulePingCheck() {
        guard let context else { return }
        pingTimer = context.eventLoop.assumeIsolated().scheduleTask(in: configuration.pingInterval) { [self] in
            self.pingCheck()
        }
    }

    /// Sends a PING when nothing arrived for a whole interval; a missing ACK closes the connection.
    private func pingCheck() {
        guard let context else { return }
        switch lifecycle {
        case .ready, .draining: break
        case .connecting, .closed: return
        }
        if receivedSinceLastPingCheck {
            receivedSinceLastPingCheck = false
        } else if outstandingPing == nil {
            pingCounter &+= 1
            let data = HTTP2PingData(withInteger: pingCounter)
            outstandingPing = data
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(data, ack: false))),
                promise: nil
            )
            pingAckTimer = context.eventLoop.assumeIsolated().scheduleTask(in: configuration.pingTimeout) { [self] in
                guard self.outstandingPing == data else { return }
                self.logger.warning("APNs did not acknowledge PING; closing the connection")
                self.context?.close(promise: nil)
            }
        }
        schedulePingCheck()
    }

    private func scheduleFlush() {
        guard !flushScheduled, let context else { return }
        flushScheduled = true
        // Flushing after the tasks already queued on the loop coalesces the writes of many
        // concurrent requests into one TLS record and one syscall.
        context.eventLoop.assumeIsolated().execute { [self] in
            self.flushScheduled = false
            self.context?.flush()
        }
    }

    private func cancelTimers() {
        handshakeTimer?.cancel()
        handshakeTimer = nil
        deadlineTimer?.task.cancel()
        deadlineTimer = nil
        pingTimer?.cancel()
        pingTimer = nil
        pingAckTimer?.cancel()
        pingAckTimer = nil
        gracefulCloseTimer?.cancel()
        gracefulCloseTimer = nil
    }
}
