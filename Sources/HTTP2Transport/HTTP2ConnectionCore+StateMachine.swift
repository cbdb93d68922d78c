import PushCore
import NIOCore
import NIOHPACK

extension HTTP2ConnectionCore {
    /// Everything one connection knows, as a value: its lifecycle, its streams and their
    /// waiters, both directions' flow-control windows, the peer's settings, HPACK state, the
    /// PING and deadline bookkeeping, and the frames queued for writing (``output``). Each input
    /// (a request, received bytes, a timer, the channel closing) changes the state and returns
    /// what the channel handler must do; the machine itself touches no channel, timer or promise,
    /// so tests drive it directly. Inbound frames are in `+Frames.swift`, outbound ones in `+Outbound.swift`,
    /// the deadline and PING timers in `+Timers.swift`. What is particular to the requests (their
    /// header blocks and bodies, the answer headers kept, the outcome) is the ``HTTP2Exchange``'s.
    ///
    /// `Waiter` is whatever the caller resumes with a stream's outcome (a continuation in the handler).
    package struct StateMachine<Waiter> {
        enum Lifecycle {
            /// TLS and the server's first SETTINGS frame are outstanding.
            case connecting
            case ready
            /// No new streams (GOAWAY or shutdown); closes once the last stream finished.
            case draining
            case closed
        }

        struct Stream {
            let requestID: UInt64
            let waiter: Waiter
            let deadline: NIODeadline
            /// What the peer lets this stream send before a WINDOW_UPDATE.
            var sendWindow: Int
            /// Request body bytes still waiting for flow-control credit.
            var unsentBody: ByteBuffer?
            /// What the exchange keeps from the request and the answer's headers.
            var answer: Exchange.Answer
            var status: Int?
            var body: ByteBuffer?
            /// The answer's body was longer than the exchange keeps: ``body`` holds its start only.
            var bodyCutOff = false
        }

        /// A header block split over HEADERS and CONTINUATION frames.
        struct PartialHeaderBlock {
            var streamID: UInt32
            var endStream: Bool
            var fragments: ByteBuffer
        }

        /// A stream that ended; `closeConnection` when it was the last one of a draining connection.
        struct FinishedStream {
            var waiter: Waiter
            var result: Result<Exchange.Outcome, any Error>
            var closeConnection: Bool
        }

        enum StartStreamAction {
            /// The stream's frames are in ``output``; arm the deadline timer when a deadline is given.
            case started(armDeadlineTimer: NIODeadline?)
            /// The request was not sent; `event` and `closeConnection` say what follows for the connection.
            case failed(Waiter, any Error, event: HTTP2ConnectionEvent?, closeConnection: Bool)
        }

        enum CloseGracefullyAction {
            case none
            case closeNow(failReady: TransportError?)
            case closeAfterGracePeriod(failReady: TransportError?)
        }

        /// What to do once the connection closed.
        struct ClosedAction {
            var failReady: TransportError?
            var failedWaiters: [Waiter]
            var error: TransportError
            var event: HTTP2ConnectionEvent?
        }

        struct DeadlineAction {
            var expired: [FinishedStream]
            var armDeadlineTimer: NIODeadline?
        }

        enum PingCheckAction {
            case stop
            case checkAgain
            /// A PING is in ``output``: check again, and close unless its ACK arrives in time.
            case sentPing(UInt64)
        }

        /// The stream limit assumed when the server's SETTINGS name none (RFC 9113: unlimited).
        package static var streamLimitWhenUnlimited: Int { 1000 }
        /// Received DATA bytes after which the connection's receive window is topped up again.
        static var windowUpdateThreshold: Int { HTTP2Wire.defaultWindowSize / 2 }
        /// The largest response header list accepted (also announced in SETTINGS).
        static var maxHeaderListSize: Int { 16_384 }
        /// The last stream ID a client may open before it has to move to a new connection.
        static var lastStreamID: UInt32 { UInt32(Int32.max) - 2 }

        /// Writes the requests and reads the answers.
        var exchange: Exchange
        private(set) var lifecycle = Lifecycle.connecting
        /// Why the connection failed before its handshake finished, reported when it closes.
        var connectFailure: TransportError?
        var streams: [UInt32: Stream] = [:]
        var nextStreamID: UInt32 = 1
        var remoteStreamLimit = 1
        var prefaceSent = false
        /// A protocol violation was answered with GOAWAY: nothing more is read.
        var sentConnectionError = false

        var reader = HTTP2Wire.FrameReader()
        var partialHeaderBlock: PartialHeaderBlock?
        var decoder: HPACKDecoder
        /// Reused for every request's header block before it is framed.
        var headerBlock: ByteBuffer
        /// Frames queued since the last flush.
        var output: ByteBuffer
        var peerMaxFrameSize = HTTP2Wire.defaultMaxFrameSize
        var peerInitialWindowSize = HTTP2Wire.defaultWindowSize
        var connectionSendWindow = HTTP2Wire.defaultWindowSize
        var receivedSinceWindowUpdate = 0
        /// Streams whose bodies wait for flow-control credit, oldest first.
        var blockedStreams = CircularBuffer<UInt32>()

        /// The deadline the handler's one deadline timer is armed for.
        var armedDeadline: NIODeadline?
        var receivedSinceLastPingCheck = false
        var outstandingPing: UInt64?
        var pingCounter: UInt64 = 0

        package init(exchange: Exchange) {
            self.exchange = exchange
            let allocator = ByteBufferAllocator()
            self.decoder = HPACKDecoder(
                allocator: allocator,
                maxDynamicTableSize: HPACKDecoder.maxDynamicTableSize,
                maxHeaderListSize: Self.maxHeaderListSize
            )
            self.headerBlock = allocator.buffer(capacity: 1024)
            self.output = allocator.buffer(capacity: 16 * 1024)
        }

        var hasOutput: Bool { output.readableBytes > 0 }
        var isClosed: Bool { if case .closed = lifecycle { true } else { false } }
        var openStreamCount: Int { streams.count }

        /// Marks `written` (a copy of ``output`` taken before writing it) as sent. The buffer's
        /// storage is reused once the channel let go of it; frames queued while it was written stay.
        mutating func outputWritten(_ written: ByteBuffer) {
            output.moveReaderIndex(forwardBy: written.readableBytes)
            if output.readableBytes == 0 { output.clear() }
        }

        // MARK: Requests

        /// Opens a stream for `request` and queues its HEADERS and DATA frames.
        mutating func startStream(
            requestID: UInt64,
            request: Exchange.Request,
            deadline: NIODeadline,
            waiter: Waiter
        ) -> StartStreamAction {
            guard case .ready = lifecycle else {
                return .failed(waiter, HTTP2StreamNotOpened(transportError: notSentError()), event: nil, closeConnection: false)
            }
            guard nextStreamID < Self.lastStreamID else {
                // Stream IDs ran out: behave as if the server sent GOAWAY so the pool replaces us.
                lifecycle = .draining
                return .failed(
                    waiter,
                    HTTP2StreamNotOpened(transportError: .streamReset("connection ran out of stream IDs; not sent")),
                    event: .goingAway(errorCode: .noError, reason: "stream IDs exhausted"),
                    closeConnection: streams.isEmpty
                )
            }
            headerBlock.clear()
            let answer = exchange.writeHeaderBlock(of: request, to: &headerBlock)
            let streamID = nextStreamID
            nextStreamID += 2
            writeHeaderBlock(on: streamID)
            var stream = Stream(
                requestID: requestID,
                waiter: waiter,
                deadline: deadline,
                sendWindow: peerInitialWindowSize,
                answer: answer
            )
            let payload = exchange.body(of: request)
            let length = payload.count
            let sendsBodyNow =
                blockedStreams.isEmpty && length <= min(peerMaxFrameSize, connectionSendWindow, peerInitialWindowSize)
            if sendsBodyNow {
                output.writeHTTP2FrameHeader(length: length, type: .data, flags: .endStream, streamID: streamID)
                output.writeBytes(payload)
                connectionSendWindow -= length
                stream.sendWindow -= length
            } else {
                var body = ByteBuffer()
                body.writeBytes(payload)
                stream.unsentBody = body
            }
            streams[streamID] = stream
            if !sendsBodyNow {
                blockedStreams.append(streamID)
                sendBlockedBodies()
            }
            return .started(armDeadlineTimer: deadlineToArm(for: deadline))
        }

        /// The caller gave up on the request: its stream is reset and its waiter returned to fail.
        mutating func cancelStream(requestID: UInt64) -> FinishedStream? {
            guard let streamID = streams.first(where: { $0.value.requestID == requestID })?.key else { return nil }
            reset(streamID, code: .cancel)
            return finish(streamID, with: .failure(CancellationError()))
        }

        /// Stops taking streams; the connection closes now if none is open, else after a grace period.
        mutating func closeGracefully() -> CloseGracefullyAction {
            var failReady: TransportError?
            switch lifecycle {
            case .closed:
                return .none
            case .connecting:
                failReady = .shuttingDown("client shut down while connecting")
            case .ready, .draining:
                break
            }
            lifecycle = .draining
            return streams.isEmpty ? .closeNow(failReady: failReady) : .closeAfterGracePeriod(failReady: failReady)
        }

        // MARK: The channel

        /// The connection preface and this client's SETTINGS: no server push, and the header list limit.
        mutating func channelActive() {
            guard !prefaceSent else { return }
            prefaceSent = true
            output.writeBytes(HTTP2Wire.clientPreface)
            output.writeHTTP2FrameHeader(length: 12, type: .settings, streamID: 0)
            output.writeInteger(HTTP2Wire.Setting.enablePush)
            output.writeInteger(UInt32(0))
            output.writeInteger(HTTP2Wire.Setting.maxHeaderListSize)
            output.writeInteger(UInt32(Self.maxHeaderListSize))
        }

        /// TLS finished; anything but HTTP/2 fails the connection (the returned error fails the handshake).
        mutating func handshakeCompleted(negotiatedProtocol: String?) -> TransportError? {
            guard negotiatedProtocol != "h2" else { return nil }
            return failConnecting(.connectionFailed("server did not negotiate HTTP/2 (ALPN: \(negotiatedProtocol ?? "none"))"))
        }

        /// The channel reported an error and is being closed; the returned error fails the handshake.
        mutating func errorCaught(_ error: TransportError) -> TransportError? {
            failConnecting(error)
        }

        /// The handshake did not finish in time; the returned error fails it and the connection closes.
        mutating func handshakeTimedOut() -> TransportError? {
            failConnecting(.connectionFailed("TLS/HTTP/2 handshake timed out"))
        }

        /// The channel closed (or the handler left it): every open stream fails. `reportClosure`
        /// asks for the `.closed` event when the connection had not closed before.
        mutating func channelClosed(streamError: TransportError, reportClosure: Bool) -> ClosedAction {
            let failReady = failConnecting(.connectionFailed("connection closed during the handshake"))
            let wasOpen = !isClosed
            lifecycle = .closed
            armedDeadline = nil
            let waiters = streams.values.map(\.waiter)
            streams = [:]
            blockedStreams.removeAll()
            return ClosedAction(
                failReady: failReady,
                failedWaiters: waiters,
                error: streamError,
                event: wasOpen && reportClosure ? .closed(failure: connectFailure) : nil
            )
        }

        // MARK: Shared steps

        /// One timer serves every stream, armed for the earliest deadline: a later deadline (the
        /// usual case) needs no timer work; an earlier one re-arms it.
        mutating func deadlineToArm(for deadline: NIODeadline) -> NIODeadline? {
            if let armed = armedDeadline, armed <= deadline { return nil }
            armedDeadline = deadline
            return deadline
        }

        /// Queues RST_STREAM for `streamID`.
        mutating func reset(_ streamID: UInt32, code: HTTP2Wire.ErrorCode) {
            guard !isClosed else { return }
            output.writeHTTP2FrameHeader(length: 4, type: .rstStream, streamID: streamID)
            output.writeInteger(code.rawValue)
        }

        /// Removes the stream and returns its waiter with `result`.
        mutating func finish(_ streamID: UInt32, with result: Result<Exchange.Outcome, any Error>) -> FinishedStream? {
            guard let stream = streams.removeValue(forKey: streamID) else { return nil }
            return FinishedStream(waiter: stream.waiter, result: result, closeConnection: isDrained)
        }

        var isDrained: Bool {
            if case .draining = lifecycle { streams.isEmpty } else { false }
        }

        /// Leaves `connecting` for `draining`, remembering `error`; returns it to fail the handshake.
        mutating func failConnecting(_ error: TransportError) -> TransportError? {
            guard case .connecting = lifecycle else { return nil }
            lifecycle = .draining
            connectFailure = error
            return error
        }

        mutating func becomeReady(streamLimit: Int) {
            remoteStreamLimit = streamLimit
            lifecycle = .ready
        }

        mutating func startDraining() {
            lifecycle = .draining
        }

        private func notSentError() -> TransportError {
            switch lifecycle {
            case .draining: .streamReset("connection is draining; request not sent")
            case .connecting, .ready, .closed: .connectionFailed("connection closed; request not sent")
            }
        }
    }
}
