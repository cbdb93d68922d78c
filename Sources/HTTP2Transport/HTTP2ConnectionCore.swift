import PushCore
package import Logging
package import NIOCore
import NIOTLS

/// How a connection handshakes and pings.
package struct HTTP2ConnectionConfiguration: Sendable {
    package var authority: String
    package var handshakeTimeout: TimeAmount
    package var pingInterval: TimeAmount
    package var pingTimeout: TimeAmount
    /// Whether an error the channel caught is a TLS failure (the TLS handler lives outside this module).
    package var isTLSFailure: @Sendable (any Error) -> Bool

    package init(
        authority: String,
        handshakeTimeout: TimeAmount,
        pingInterval: TimeAmount,
        pingTimeout: TimeAmount,
        isTLSFailure: @escaping @Sendable (any Error) -> Bool
    ) {
        self.authority = authority
        self.handshakeTimeout = handshakeTimeout
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.isTLSFailure = isTLSFailure
    }
}

/// The HTTP/2 client of one connection, directly behind TLS, for the requests of one
/// ``HTTP2Exchange``: it writes each request as a HEADERS and a DATA frame on a new stream,
/// matches answers to callers, enforces deadlines, drains on GOAWAY, keeps both directions'
/// flow-control windows and pings idle connections.
///
/// It speaks HTTP/2 itself (``HTTP2Wire``) rather than through a general HTTP/2 stack: an APNs
/// client only sends small requests and reads small answers, and per-stream state machines and
/// Huffman coding of the path, JWT and apns-id (values that change on every request) were most
/// of the sender's CPU time. FCM's sends are small requests with small answers too, and go
/// through the same code (``FCMExchange``). Header blocks are written by the exchange and
/// decoded by NIOHPACK's decoder.
///
/// The protocol lives in ``StateMachine``; this class feeds it the channel's events and performs
/// what it returns: resuming callers, fulfilling the ready promise, timers, flushes and closing.
/// It is no channel handler itself: each platform's handler forwards to it, and the optimiser
/// specialises this generic code for that platform's exchange in the platform's module (this
/// module is built with every body serialised for that: see Package.swift). All state lives on
/// the channel's event loop.
package final class HTTP2ConnectionCore<Exchange: HTTP2Exchange> {
    package typealias Waiter = HTTP2StreamWaiter<Exchange.Outcome>

    private let configuration: HTTP2ConnectionConfiguration
    private let logger: Logger
    private let onEvent: @Sendable (HTTP2ConnectionEvent) -> Void

    private var state: StateMachine<Waiter>
    private var context: ChannelHandlerContext?
    /// Fulfilled once: with the stream limit when the handshake finished, or with why it failed.
    private var readyPromise: EventLoopPromise<Int>?
    private var flushScheduled = false

    private var handshakeTimer: Scheduled<Void>?
    private var deadlineTimer: Scheduled<Void>?
    private var pingTimer: Scheduled<Void>?
    private var pingAckTimer: Scheduled<Void>?
    private var gracefulCloseTimer: Scheduled<Void>?

    package init(
        configuration: HTTP2ConnectionConfiguration,
        exchange: Exchange,
        readyPromise: EventLoopPromise<Int>,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) {
        self.configuration = configuration
        self.state = StateMachine(exchange: exchange)
        self.readyPromise = readyPromise
        self.logger = logger
        self.onEvent = onEvent
    }

    // MARK: Calls from the connection (on the event loop)

    /// Opens a stream for `request`; `waiter` is called exactly once, on the event loop, with the
    /// answer or an error.
    package func startStream(
        requestID: UInt64,
        request: Exchange.Request,
        deadline: NIODeadline,
        waiter: Waiter
    ) {
        switch state.startStream(requestID: requestID, request: request, deadline: deadline, waiter: waiter) {
        case .started(let deadlineToArm):
            if let deadlineToArm { armDeadlineTimer(for: deadlineToArm) }
        case .failed(let waiter, let error, let event, let closeConnection):
            if let event { onEvent(event) }
            waiter.resume(throwing: error)
            if closeConnection { context?.close(promise: nil) }
        }
        scheduleFlush()
    }

    /// The caller's task was cancelled: reset its stream.
    package func cancelStream(requestID: UInt64) {
        guard let finished = state.cancelStream(requestID: requestID) else { return }
        scheduleFlush()
        resume(finished)
    }

    /// Changes the exchange for streams opened from now on (APNs: a new provider token).
    package func updateExchange(_ update: (inout Exchange) -> Void) {
        update(&state.exchange)
    }

    /// Stops taking streams and closes once in-flight streams finished or `timeout` passed.
    package func closeGracefully(within timeout: TimeAmount) {
        switch state.closeGracefully() {
        case .none:
            return
        case .closeNow(let failReady):
            if let failReady { readyFailed(failReady) }
            context?.close(promise: nil)
        case .closeAfterGracePeriod(let failReady):
            if let failReady { readyFailed(failReady) }
            guard gracefulCloseTimer == nil, let context else { return }
            gracefulCloseTimer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                self.context?.close(promise: nil)
            }
        }
    }

    // MARK: The channel handler's events

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        handshakeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: configuration.handshakeTimeout) {
            [self] in
            guard let failure = state.handshakeTimedOut() else { return }
            readyFailed(failure)
            self.context?.close(promise: nil)
        }
        if context.channel.isActive { sendPreface() }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        // A channel that never became active (connection refused) sees no channelInactive.
        connectionClosed(streamError: .connectionFailed("connection handler removed"), reportClosure: false)
        self.context = nil
    }

    package func channelActive(context: ChannelHandlerContext) {
        sendPreface()
        context.fireChannelActive()
    }

    package func channelRead(_ bytes: ByteBuffer) {
        state.bytesReceived(bytes)
        while let action = state.nextFrameAction() {
            perform(action)
        }
        scheduleFlush()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent,
            let failure = state.handshakeCompleted(negotiatedProtocol: negotiated)
        {
            readyFailed(failure)
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("\(Exchange.peerName) connection error", metadata: [HTTP2LoggingKeys.error: "\(error)"])
        let tlsFailed = configuration.isTLSFailure(error)
        let transportError: TransportError =
            tlsFailed ? .tlsHandshakeFailed("\(error)") : .connectionFailed("\(error)")
        if let failure = state.errorCaught(transportError) { readyFailed(failure) }
        context.close(promise: nil)
    }

    package func channelInactive(context: ChannelHandlerContext) {
        connectionClosed(streamError: .connectionFailed("connection to \(Exchange.peerName) closed before the answer"), reportClosure: true)
        context.fireChannelInactive()
    }

    // MARK: Performing the state machine's actions

    private func perform(_ action: StateMachine<Waiter>.FrameAction) {
        switch action {
        case .finishStream(let finished):
            resume(finished)
        case .ready(let streamLimit):
            handshakeTimer?.cancel()
            handshakeTimer = nil
            schedulePingCheck()
            readyPromise?.succeed(streamLimit)
            readyPromise = nil
        case .streamLimitChanged(let limit):
            onEvent(.streamLimitChanged(limit))
        case .pingAcknowledged:
            pingAckTimer?.cancel()
            pingAckTimer = nil
        case .goingAway(let goAway):
            if let failReady = goAway.failReady { readyFailed(failReady) }
            // The pool first, then the callers: a batch's callback, run here, gives its stream
            // back at once, and the pool must not hand that stream out again on this connection.
            onEvent(goAway.event)
            for finished in goAway.refused { finished.waiter.resume(with: finished.result) }
            if goAway.closeConnection { context?.close(promise: nil) }
        case .connectionError(let error, let failReady):
            logger.warning("\(Exchange.peerName) connection protocol error", metadata: [HTTP2LoggingKeys.error: "\(error)"])
            if let failReady { readyFailed(failReady) }
            flushNow()
            context?.close(promise: nil)
        }
    }

    private func resume(_ finished: StateMachine<Waiter>.FinishedStream) {
        finished.waiter.resume(with: finished.result)
        if finished.closeConnection { context?.close(promise: nil) }
    }

    private func readyFailed(_ error: TransportError) {
        readyPromise?.fail(error)
        readyPromise = nil
    }

    private func connectionClosed(streamError: TransportError, reportClosure: Bool) {
        let closed = state.channelClosed(streamError: streamError, reportClosure: reportClosure)
        if let failReady = closed.failReady { readyFailed(failReady) }
        cancelTimers()
        // The pool first, as for GOAWAY.
        if let event = closed.event { onEvent(event) }
        for waiter in closed.failedWaiters { waiter.resume(throwing: closed.error) }
    }

    private func sendPreface() {
        state.channelActive()
        scheduleFlush()
    }

    // MARK: Timers and flushing

    private func armDeadlineTimer(for deadline: NIODeadline) {
        deadlineTimer?.cancel()
        guard let context else { return }
        deadlineTimer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            deadlineTimerFired()
        }
    }

    private func deadlineTimerFired() {
        deadlineTimer = nil
        guard let context else { return }
        let action = state.deadlineTimerFired(now: context.eventLoop.now)
        scheduleFlush()
        for finished in action.expired { resume(finished) }
        if let next = action.armDeadlineTimer { armDeadlineTimer(for: next) }
    }

    private func schedulePingCheck() {
        guard let context else { return }
        pingTimer = context.eventLoop.assumeIsolated().scheduleTask(in: configuration.pingInterval) { [self] in
            pingCheck()
        }
    }

    /// Sends a PING when nothing arrived for a whole interval; a missing ACK closes the connection.
    private func pingCheck() {
        guard let context else { return }
        switch state.pingCheckFired() {
        case .stop:
            return
        case .checkAgain:
            break
        case .sentPing(let data):
            scheduleFlush()
            pingAckTimer = context.eventLoop.assumeIsolated().scheduleTask(in: configuration.pingTimeout) { [self] in
                guard state.pingAckTimedOut(data: data) else { return }
                logger.warning("\(Exchange.peerName) did not acknowledge PING; closing the connection")
                self.context?.close(promise: nil)
            }
        }
        schedulePingCheck()
    }

    private func scheduleFlush() {
        guard !flushScheduled, state.hasOutput, let context else { return }
        flushScheduled = true
        // Flushing after the tasks already queued on the loop coalesces the frames of many
        // concurrent requests into one write, one TLS record and one syscall.
        context.eventLoop.assumeIsolated().execute { [self] in
            flushScheduled = false
            flushNow()
        }
    }

    private func flushNow() {
        guard let context, state.hasOutput else { return }
        // Written from a copy: the write may call back into this handler (an error closing the channel).
        let bytes = state.output
        context.writeAndFlush(NIOAny(bytes), promise: nil)
        state.outputWritten(bytes)
    }

    private func cancelTimers() {
        for timer in [handshakeTimer, deadlineTimer, pingTimer, pingAckTimer, gracefulCloseTimer] {
            timer?.cancel()
        }
        handshakeTimer = nil
        deadlineTimer = nil
        pingTimer = nil
        pingAckTimer = nil
        gracefulCloseTimer = nil
    }
}
