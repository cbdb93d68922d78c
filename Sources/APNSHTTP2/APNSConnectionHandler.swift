import APNSCore
import Logging
import NIOCore
import NIOHPACK
import NIOSSL
import NIOTLS

/// What a connection tells the pool about itself.
enum APNSConnectionEvent: Sendable {
    /// The server changed SETTINGS_MAX_CONCURRENT_STREAMS.
    case streamLimitChanged(Int)
    /// A GOAWAY arrived (or stream IDs ran out): the connection takes no new streams.
    case goingAway(errorCode: HTTP2Wire.ErrorCode, reason: String?)
    /// The connection closed; `failure` says why when it never finished its handshake.
    case closed(failure: APNSTransportError?)
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

/// The HTTP/2 client of one APNs connection, directly behind TLS: it writes each request as a
/// HEADERS and a DATA frame on a new stream, matches answers to callers, enforces deadlines,
/// drains on GOAWAY, keeps both directions' flow-control windows and pings idle connections.
///
/// It speaks HTTP/2 itself (``HTTP2Wire``) rather than through a general HTTP/2 stack: an APNs
/// client only sends small requests and reads small answers, and per-stream state machines and
/// Huffman coding of the path, JWT and apns-id (values that change on every request) were most
/// of the sender's CPU time. Header blocks use NIOHPACK's encoder and decoder.
///
/// All state lives on the channel's event loop; ``APNSConnection`` reaches it through `NIOLoopBound`.
final class APNSConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct Configuration: Sendable {
        var authority: String
        var handshakeTimeout: TimeAmount
        var pingInterval: TimeAmount
        var pingTimeout: TimeAmount
    }

    /// The stream limit assumed when the server's SETTINGS name none (RFC 9113: unlimited).
    static let streamLimitWhenUnlimited = 1000
    /// Received DATA bytes after which the connection's receive window is topped up again.
    private static let windowUpdateThreshold = HTTP2Wire.defaultWindowSize / 2
    /// The largest response header list accepted (also announced in SETTINGS).
    static let maxHeaderListSize = 16_384
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
        /// What the peer lets this stream send before a WINDOW_UPDATE.
        var sendWindow: Int
        /// Request body bytes still waiting for flow-control credit.
        var unsentBody: ByteBuffer?
        var status: Int?
        var apnsID: String?
        var body: ByteBuffer?
    }

    /// A header block split over HEADERS and CONTINUATION frames.
    private struct PartialHeaderBlock {
        var streamID: UInt32
        var endStream: Bool
        var fragments: ByteBuffer
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
    /// Why the connection failed before its handshake finished, reported when it closes.
    private var connectFailure: APNSTransportError?
    private var streams: [UInt32: PendingStream] = [:]
    private var nextStreamID: UInt32 = 1
    private var remoteStreamLimit = 1
    private var authorization: Authorization?
    private var headerIndexing = APNSRequestHeaders.IndexingState()
    private var flushScheduled = false
    private var prefaceSent = false

    private var reader = HTTP2Wire.FrameReader()
    private var partialHeaderBlock: PartialHeaderBlock?
    private var encoder: HPACKEncoder
    private var decoder: HPACKDecoder
    /// Reused for every request's header block before it is framed.
    private var headerBlock: ByteBuffer
    /// Frames written since the last flush.
    private var output: ByteBuffer
    private var peerMaxFrameSize = HTTP2Wire.defaultMaxFrameSize
    private var peerInitialWindowSize = HTTP2Wire.defaultWindowSize
    private var connectionSendWindow = HTTP2Wire.defaultWindowSize
    private var receivedSinceWindowUpdate = 0
    /// Streams whose bodies wait for flow-control credit, oldest first.
    private var blockedStreams = CircularBuffer<UInt32>()

    private var handshakeTimer: Scheduled<Void>?
    private var deadlineTimer: (deadline: NIODeadline, task: Scheduled<Void>)?
    private var pingTimer: Scheduled<Void>?
    private var pingAckTimer: Scheduled<Void>?
    private var gracefulCloseTimer: Scheduled<Void>?
    private var receivedSinceLastPingCheck = false
    private var outstandingPing: UInt64?
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
        let allocator = ByteBufferAllocator()
        self.encoder = HPACKEncoder(allocator: allocator, useHuffmanEncoding: false)
        self.decoder = HPACKDecoder(
            allocator: allocator,
            maxDynamicTableSize: HPACKDecoder.maxDynamicTableSize,
            maxHeaderListSize: Self.maxHeaderListSize
        )
        self.headerBlock = allocator.buffer(capacity: 1024)
        self.output = allocator.buffer(capacity: 16 * 1024)
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
        guard context != nil, case .ready = lifecycle else {
            continuation.resume(throwing: APNSStreamNotOpened(transportError: notSentError()))
            return
        }
        guard nextStreamID < UInt32(Int32.max) - 2 else {
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
        nextStreamID += 2

        let headers = APNSRequestHeaders.make(
            for: request,
            authority: configuration.authority,
            authorization: authorization?.headerValue,
            indexing: &headerIndexing
        )
        headerBlock.clear()
        do {
            try encoder.encode(headers: headers, to: &headerBlock)
        } catch {
            // Only a misused encoder throws; nothing was written for this stream.
            continuation.resume(throwing: APNSTransportError.connectionFailed("HPACK encoding failed: \(error)"))
            return
        }
        writeHeaderBlock(on: streamID)
        streams[streamID] = PendingStream(
            requestID: requestID,
            continuation: continuation,
            deadline: deadline,
            providerToken: authorization?.token,
            sendWindow: peerInitialWindowSize
        )
        armDeadlineTimer(for: deadline)

        let length = request.payload.count
        if blockedStreams.isEmpty, length <= min(peerMaxFrameSize, connectionSendWindow, peerInitialWindowSize) {
            output.writeHTTP2FrameHeader(length: length, type: .data, flags: .endStream, streamID: streamID)
            output.writeBytes(request.payload)
            connectionSendWindow -= length
            streams[streamID]!.sendWindow -= length
        } else {
            var body = ByteBuffer()
            body.writeBytes(request.payload)
            streams[streamID]!.unsentBody = body
            blockedStreams.append(streamID)
            sendBlockedBodies()
        }
        scheduleFlush()
    }

    /// The caller's task was cancelled: reset its stream.
    func cancelStream(requestID: UInt64) {
        guard let streamID = streams.first(where: { $0.value.requestID == requestID })?.key else { return }
        reset(streamID, code: .cancel)
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
        if context.channel.isActive { sendPreface() }
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

    func channelActive(context: ChannelHandlerContext) {
        sendPreface()
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        receivedSinceLastPingCheck = true
        reader.append(unwrapInboundIn(data))
        do {
            while let frame = try reader.nextFrame() {
                try received(frame)
                if case .closed = lifecycle { return }
            }
        } catch {
            failConnection(error)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent,
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
        logger.debug("APNs connection error", metadata: [APNSLoggingKeys.error: "\(error)"])
        let tlsFailed = error is NIOSSLError || error is BoringSSLError
        failConnecting(tlsFailed ? APNSTransportError.tlsHandshakeFailed("\(error)") : APNSTransportError.connectionFailed("\(error)"))
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
        if wasOpen { onEvent(.closed(failure: connectFailure)) }
        context.fireChannelInactive()
    }

    // MARK: Writing frames

    /// The connection preface and this client's SETTINGS: no server push, and the header list limit.
    private func sendPreface() {
        guard !prefaceSent else { return }
        prefaceSent = true
        output.writeBytes(HTTP2Wire.clientPreface)
        output.writeHTTP2FrameHeader(length: 12, type: .settings, streamID: 0)
        output.writeInteger(HTTP2Wire.Setting.enablePush)
        output.writeInteger(UInt32(0))
        output.writeInteger(HTTP2Wire.Setting.maxHeaderListSize)
        output.writeInteger(UInt32(Self.maxHeaderListSize))
        scheduleFlush()
    }

    /// Frames ``headerBlock`` as HEADERS plus, beyond the peer's frame size, CONTINUATION frames.
    private func writeHeaderBlock(on streamID: UInt32) {
        var type = HTTP2Wire.FrameType.headers
        repeat {
            let length = min(headerBlock.readableBytes, peerMaxFrameSize)
            let isLast = length == headerBlock.readableBytes
            output.writeHTTP2FrameHeader(length: length, type: type, flags: isLast ? .endHeaders : [], streamID: streamID)
            var fragment = headerBlock.readSlice(length: length)!
            output.writeBuffer(&fragment)
            type = .continuation
        } while headerBlock.readableBytes > 0
    }

    /// Sends waiting request bodies, oldest first, as far as the flow-control windows allow.
    private func sendBlockedBodies() {
        while let streamID = blockedStreams.first {
            if streams[streamID]?.unsentBody != nil {
                guard sendBody(of: streamID) else { return }
            }
            blockedStreams.removeFirst()
        }
    }

    /// Writes DATA frames for the stream's unsent body; true once all of it is written.
    private func sendBody(of streamID: UInt32) -> Bool {
        guard var stream = streams[streamID], var body = stream.unsentBody else { return true }
        defer { streams[streamID] = stream }
        repeat {
            let length = min(body.readableBytes, peerMaxFrameSize, stream.sendWindow, connectionSendWindow)
            guard length > 0 || body.readableBytes == 0 else {
                stream.unsentBody = body
                return false
            }
            var chunk = body.readSlice(length: length)!
            let isLast = body.readableBytes == 0
            output.writeHTTP2FrameHeader(length: length, type: .data, flags: isLast ? .endStream : [], streamID: streamID)
            output.writeBuffer(&chunk)
            stream.sendWindow -= length
            connectionSendWindow -= length
        } while body.readableBytes > 0
        stream.unsentBody = nil
        return true
    }

    private func reset(_ streamID: UInt32, code: HTTP2Wire.ErrorCode) {
        guard context != nil else { return }
        output.writeHTTP2FrameHeader(length: 4, type: .rstStream, streamID: streamID)
        output.writeInteger(code.rawValue)
        scheduleFlush()
    }

    /// A protocol violation: GOAWAY naming it, then close; in-flight streams fail as the channel closes.
    private func failConnection(_ error: HTTP2Wire.ConnectionError) {
        logger.warning("APNs connection protocol error", metadata: [APNSLoggingKeys.error: "\(error)"])
        failConnecting(APNSTransportError.connectionFailed("HTTP/2 \(error)"))
        guard let context else { return }
        output.writeHTTP2FrameHeader(length: 8, type: .goAway, streamID: 0)
        output.writeInteger(UInt32(0))
        output.writeInteger(error.code.rawValue)
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        output.clear()
        context.close(promise: nil)
    }

    // MARK: Inbound frames

    private func received(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        if let partial = partialHeaderBlock, frame.type != .continuation || frame.streamID != partial.streamID {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "header block interrupted by another frame")
        }
        switch frame.type {
        case .data:
            try receivedData(frame)
        case .headers:
            try receivedHeaders(frame)
        case .continuation:
            try receivedContinuation(frame)
        case .rstStream:
            try expect(frame, onStream: true, length: 4)
            let code = HTTP2Wire.ErrorCode(rawValue: frame.payload.getInteger(at: frame.payload.readerIndex)!)
            finish(frame.streamID, with: .failure(APNSTransportError.streamReset("APNs reset the stream (\(code))")))
        case .settings:
            try receivedSettings(frame)
        case .ping:
            try expect(frame, onStream: false, length: 8)
            receivedPing(frame)
        case .goAway:
            try receivedGoAway(frame)
        case .windowUpdate:
            try receivedWindowUpdate(frame)
        case .pushPromise:
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "PUSH_PROMISE although push is disabled")
        default:
            break  // PRIORITY and unknown frame types are ignored (RFC 9113 sections 5.5 and 6.3).
        }
    }

    private func expect(
        _ frame: HTTP2Wire.Frame,
        onStream: Bool,
        length: Int? = nil
    ) throws(HTTP2Wire.ConnectionError) {
        guard (frame.streamID != 0) == onStream else {
            throw HTTP2Wire.ConnectionError(
                code: .protocolError,
                detail: "frame type \(frame.type.rawValue) on stream \(frame.streamID)"
            )
        }
        if let length, frame.payload.readableBytes != length {
            throw HTTP2Wire.ConnectionError(
                code: .frameSizeError,
                detail: "frame type \(frame.type.rawValue) with \(frame.payload.readableBytes) bytes"
            )
        }
    }

    private func receivedData(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        try expect(frame, onStream: true)
        // Every DATA byte, padding included and whatever the stream's fate, uses connection window.
        receivedSinceWindowUpdate += frame.payload.readableBytes
        if receivedSinceWindowUpdate >= Self.windowUpdateThreshold {
            output.writeHTTP2FrameHeader(length: 4, type: .windowUpdate, streamID: 0)
            output.writeInteger(UInt32(receivedSinceWindowUpdate))
            receivedSinceWindowUpdate = 0
            scheduleFlush()
        }
        var payload = frame.payload
        try payload.removeHTTP2Padding(flags: frame.flags)
        if streams[frame.streamID] != nil {
            if streams[frame.streamID]!.body == nil {
                streams[frame.streamID]!.body = payload
            } else if streams[frame.streamID]!.body!.readableBytes + payload.readableBytes <= Self.maximumBodyBytes {
                streams[frame.streamID]!.body!.writeBuffer(&payload)
            }
        }
        if frame.flags.contains(.endStream) { complete(frame.streamID) }
    }

    private func receivedHeaders(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        try expect(frame, onStream: true)
        var fragment = frame.payload
        try fragment.removeHTTP2Padding(flags: frame.flags)
        if frame.flags.contains(.priority) {
            guard fragment.readableBytes >= 5 else {
                throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "HEADERS too short for its priority")
            }
            fragment.moveReaderIndex(forwardBy: 5)
        }
        let endStream = frame.flags.contains(.endStream)
        if frame.flags.contains(.endHeaders) {
            try receivedHeaderBlock(&fragment, on: frame.streamID, endStream: endStream)
        } else {
            partialHeaderBlock = PartialHeaderBlock(streamID: frame.streamID, endStream: endStream, fragments: fragment)
        }
    }

    private func receivedContinuation(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        guard var partial = partialHeaderBlock else {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "CONTINUATION without a header block")
        }
        var fragment = frame.payload
        partial.fragments.writeBuffer(&fragment)
        guard partial.fragments.readableBytes <= Self.maxHeaderListSize else {
            throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "header block too large")
        }
        if frame.flags.contains(.endHeaders) {
            partialHeaderBlock = nil
            try receivedHeaderBlock(&partial.fragments, on: partial.streamID, endStream: partial.endStream)
        } else {
            partialHeaderBlock = partial
        }
    }

    /// Decodes every header block (even for finished streams: HPACK state is per connection) and
    /// keeps the status and apns-id of a stream still waiting.
    private func receivedHeaderBlock(
        _ block: inout ByteBuffer,
        on streamID: UInt32,
        endStream: Bool
    ) throws(HTTP2Wire.ConnectionError) {
        let headers: HPACKHeaders
        do {
            headers = try decoder.decodeHeaders(from: &block)
        } catch {
            throw HTTP2Wire.ConnectionError(code: .compressionError, detail: "undecodable header block: \(error)")
        }
        guard streams[streamID] != nil else { return }
        var status: Int?
        var apnsID: String?
        for header in headers {
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
        if endStream { complete(streamID) }
    }

    private func receivedSettings(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        try expect(frame, onStream: false)
        if frame.flags.contains(.ack) {
            guard frame.payload.readableBytes == 0 else {
                throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "SETTINGS acknowledgement with a payload")
            }
            return
        }
        guard frame.payload.readableBytes % 6 == 0 else {
            throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "SETTINGS payload not a multiple of 6")
        }
        var payload = frame.payload
        var limit: Int?
        while let identifier = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            switch identifier {
            case HTTP2Wire.Setting.headerTableSize:
                // The encoder may use less than the peer allows, never more (RFC 7541 section 4.2).
                try? encoder.setDynamicTableSize(min(Int(value), HPACKEncoder.defaultDynamicTableSize))
            case HTTP2Wire.Setting.maxConcurrentStreams:
                limit = Int(value)
            case HTTP2Wire.Setting.initialWindowSize:
                try peerInitialWindowSizeChanged(to: Int(value))
            case HTTP2Wire.Setting.maxFrameSize:
                guard (HTTP2Wire.defaultMaxFrameSize...16_777_215).contains(Int(value)) else {
                    throw HTTP2Wire.ConnectionError(code: .protocolError, detail: "SETTINGS_MAX_FRAME_SIZE \(value)")
                }
                peerMaxFrameSize = Int(value)
            default:
                break
            }
        }
        output.writeHTTP2FrameHeader(length: 0, type: .settings, flags: .ack, streamID: 0)
        scheduleFlush()

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

    /// A new SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's window by the difference.
    private func peerInitialWindowSizeChanged(to size: Int) throws(HTTP2Wire.ConnectionError) {
        guard size <= HTTP2Wire.maxWindowSize else {
            throw HTTP2Wire.ConnectionError(code: .flowControlError, detail: "SETTINGS_INITIAL_WINDOW_SIZE \(size)")
        }
        let delta = size - peerInitialWindowSize
        peerInitialWindowSize = size
        guard delta != 0 else { return }
        for streamID in streams.keys {
            streams[streamID]!.sendWindow += delta
            guard streams[streamID]!.sendWindow <= HTTP2Wire.maxWindowSize else {
                throw HTTP2Wire.ConnectionError(code: .flowControlError, detail: "stream window above 2^31-1")
            }
        }
        if delta > 0 { sendBlockedBodies() }
    }

    private func receivedWindowUpdate(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        guard frame.payload.readableBytes == 4 else {
            throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "WINDOW_UPDATE of \(frame.payload.readableBytes) bytes")
        }
        let increment = Int(frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt32.self)! & 0x7fff_ffff)
        if frame.streamID == 0 {
            guard increment > 0, connectionSendWindow + increment <= HTTP2Wire.maxWindowSize else {
                throw HTTP2Wire.ConnectionError(code: .flowControlError, detail: "connection WINDOW_UPDATE of \(increment)")
            }
            connectionSendWindow += increment
        } else if let window = streams[frame.streamID]?.sendWindow {
            guard increment > 0, window + increment <= HTTP2Wire.maxWindowSize else {
                reset(frame.streamID, code: .flowControlError)
                finish(frame.streamID, with: .failure(APNSTransportError.streamReset("invalid WINDOW_UPDATE")))
                return
            }
            streams[frame.streamID]!.sendWindow = window + increment
        }
        sendBlockedBodies()
        scheduleFlush()
    }

    private func receivedPing(_ frame: HTTP2Wire.Frame) {
        let data = frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt64.self)!
        if frame.flags.contains(.ack) {
            if data == outstandingPing {
                outstandingPing = nil
                pingAckTimer?.cancel()
                pingAckTimer = nil
            }
        } else {
            output.writeHTTP2FrameHeader(length: 8, type: .ping, flags: .ack, streamID: 0)
            output.writeInteger(data)
            scheduleFlush()
        }
    }

    private func receivedGoAway(_ frame: HTTP2Wire.Frame) throws(HTTP2Wire.ConnectionError) {
        try expect(frame, onStream: false)
        var payload = frame.payload
        guard let last = payload.readInteger(as: UInt32.self), let code = payload.readInteger(as: UInt32.self) else {
            throw HTTP2Wire.ConnectionError(code: .frameSizeError, detail: "GOAWAY shorter than 8 bytes")
        }
        let lastStreamID = last & 0x7fff_ffff
        let errorCode = HTTP2Wire.ErrorCode(rawValue: code)
        let reason = payload.readableBytes > 0 ? APNSResponseBody(parsing: payload).reason : nil
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

    private func complete(_ streamID: UInt32) {
        guard let stream = streams[streamID] else { return }
        guard let status = stream.status else {
            finish(streamID, with: .failure(APNSTransportError.streamReset("APNs ended the stream without a status")))
            return
        }
        if stream.unsentBody != nil {
            // Answered before the whole body was sent (RFC 9113 section 8.1): stop sending it.
            reset(streamID, code: .noError)
        }
        var response = APNSResponse(status: status, apnsID: stream.apnsID)
        if status != 200, let body = stream.body, body.readableBytes > 0 {
            let parsed = APNSResponseBody(parsing: body)
            response.reason = parsed.reason.map(APNSReason.init)
            response.timestampMilliseconds = parsed.timestampMilliseconds
        }
        finish(streamID, with: .success(APNSStreamOutcome(response: response, providerToken: stream.providerToken)))
    }

    private func finish(_ streamID: UInt32, with result: Result<APNSStreamOutcome, any Error>) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.continuation.resume(with: result)
        closeIfDrained()
    }

    private func closeIfDrained() {
        guard case .draining = lifecycle, streams.isEmpty else { return }
        context?.close(promise: nil)
    }

    private func notSentError() -> APNSTransportError {
        switch lifecycle {
        case .draining: .streamReset("connection is draining; request not sent")
        case .connecting, .ready, .closed: .connectionFailed("connection closed; request not sent")
        }
    }

    private func failConnecting(_ error: APNSTransportError) {
        guard case .connecting(let promise) = lifecycle else { return }
        lifecycle = .draining
        connectFailure = error
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
        var expired: [UInt32] = []
        var nextDeadline: NIODeadline?
        for (streamID, stream) in streams {
            if stream.deadline <= now {
                expired.append(streamID)
            } else if nextDeadline.map({ stream.deadline < $0 }) ?? true {
                nextDeadline = stream.deadline
            }
        }
        for streamID in expired {
            reset(streamID, code: .cancel)
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
            let data = pingCounter
            outstandingPing = data
            output.writeHTTP2FrameHeader(length: 8, type: .ping, streamID: 0)
            output.writeInteger(data)
            scheduleFlush()
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
        // Flushing after the tasks already queued on the loop coalesces the frames of many
        // concurrent requests into one write, one TLS record and one syscall.
        context.eventLoop.assumeIsolated().execute { [self] in
            self.flushScheduled = false
            self.flushOutput()
        }
    }

    private func flushOutput() {
        guard let context, output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        // Reuses the storage once TLS has encrypted the bytes (copy-on-write while it has not).
        output.clear()
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
