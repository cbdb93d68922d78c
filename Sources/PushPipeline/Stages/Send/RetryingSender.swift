public import WebPushCore
import PushCore
public import PushStores
public import APNSCore
public import FCMCore
import Foundation

/// The final answer for one device after retries.
public struct DeliveryOutcome: Sendable, Hashable {
    public var status: DeviceResult.Status
    public var apnsStatus: Int?
    public var reason: String?
    public var attempts: Int
    /// For `unregistered`: APNs' timestamp in milliseconds since 1970.
    public var unregisteredAtMilliseconds: Int64?
    /// `apns-unique-id` of APNs' final answer, when it sent one.
    public var apnsUniqueID: String?
    /// A channel management answer's `apns-channel-id` and body (a channel's settings, or the list).
    public var channelID: String?
    public var body: [UInt8]?
    /// The service the device was sent to.
    public var platform: DevicePlatform = .apns
    /// FCM's HTTP status of its final answer (FCM only).
    public var fcmStatus: Int?
    /// The message `name` FCM returned (FCM only).
    public var fcmMessageID: String?
    /// The push service's HTTP status of its final answer (web push only).
    public var webPushStatus: Int?
    /// The `Location` the push service returned for a delivered message (web push only).
    public var webPushLocation: String?

    public init(
        status: DeviceResult.Status,
        apnsStatus: Int?,
        reason: String?,
        attempts: Int,
        unregisteredAtMilliseconds: Int64? = nil,
        apnsUniqueID: String? = nil,
        channelID: String? = nil,
        body: [UInt8]? = nil
    ) {
        self.status = status
        self.apnsStatus = apnsStatus
        self.reason = reason
        self.attempts = attempts
        self.unregisteredAtMilliseconds = unregisteredAtMilliseconds
        self.apnsUniqueID = apnsUniqueID
        self.channelID = channelID
        self.body = body
    }
}

/// Why ``RetryingSender/deliver(_:environment:consumedAt:unless:)`` stopped without an outcome.
public enum DeliveryStopped: Error, Sendable, Hashable {
    /// The caller's task was cancelled.
    case cancelled
    /// The caller's fence closed: no further attempt may start (the message's partition went to
    /// another member of the group, which delivers it).
    case fenced
}

/// Sends one notification to one device with Apple's retry rules.
///
/// - 200 is `delivered`, 410 `unregistered`; 400, 403, 413 and other final answers `rejected`.
/// - 429 TooManyRequests concerns that device token: only this notification backs off.
/// - 500, 503 and lost, failed or timed-out connections back off exponentially with full jitter,
///   and also engage a shared ``LoadSheddingGate``, so every notification of this sender slows
///   down while APNs sheds load.
/// - A topic no credential serves is `rejected` with reason `NoCredentialForTopic`, unsent; a
///   broadcast for an app with a certificate credential with `TokenAuthenticationRequired`.
/// - Broadcasts go through `broadcastClient` (the broadcast hosts), everything else `client`.
/// - Attempts are bounded by ``RetryPolicy/maxAttempts`` and time by
///   ``RetryPolicy/deliveryDeadline`` (then `failed`); a notification whose `expiration` passes
///   before it could be sent is `expired`.
public struct RetryingSender: Sendable {
    let client: any APNSClientProtocol
    let broadcastClient: any APNSClientProtocol
    /// Sends to Android devices; nil: none is served (each gets `rejected`, `NoCredentialForPackage`).
    let fcmClient: (any FCMClientProtocol)?
    /// Sends to browsers; nil: none is served (each gets `rejected`, `NoCredentialForApp`).
    let webPushClient: (any WebPushClientProtocol)?
    let policy: RetryPolicy
    let epochMilliseconds: @Sendable () -> Int64
    private let loadShedding: LoadSheddingGate<PipelineClock>
    /// Each Firebase project's pause after its quota ran out or FCM struggled.
    let fcmProjects: FCMProjectGates
    let metrics: SenderMetrics

    /// `broadcastClient` sends broadcasts to channels; by default `client` does. `fcmClient`
    /// sends to Android devices, `webPushClient` to browsers.
    public init(
        client: any APNSClientProtocol,
        broadcastClient: (any APNSClientProtocol)? = nil,
        fcmClient: (any FCMClientProtocol)? = nil,
        webPushClient: (any WebPushClientProtocol)? = nil,
        policy: RetryPolicy,
        metrics: SenderMetrics = SenderMetrics(),
        epochMilliseconds: (@Sendable () -> Int64)? = nil
    ) {
        self.client = client
        self.broadcastClient = broadcastClient ?? client
        self.fcmClient = fcmClient
        self.webPushClient = webPushClient
        self.policy = policy
        self.metrics = metrics
        self.epochMilliseconds = epochMilliseconds ?? { PipelineClock.wallMilliseconds }
        self.loadShedding = LoadSheddingGate(policy: policy.loadShedding, clock: PipelineClock())
        self.fcmProjects = FCMProjectGates(policy: policy.loadShedding)
    }

    /// The pause every new attempt currently waits because APNs sheds load (zero when healthy).
    public var loadSheddingPause: Duration { loadShedding.currentPause }

    /// Delivers `request`. Before each attempt, the first included, asks `fence`; once it is
    /// closed no attempt starts and this throws ``DeliveryStopped/fenced``; every wait between
    /// attempts is the fence's, so a closing fence ends it. Throws ``DeliveryStopped/cancelled``
    /// when cancelled. Either way the caller reports nothing, so the message is not acknowledged
    /// and is delivered again (by whoever owns it then).
    public func deliver(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        consumedAt: ContinuousClock.Instant,
        fence: SendFence = .open
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        var history = AttemptHistory()
        return try await attempt(request, environment: environment, consumedAt: consumedAt, history: &history, fence: fence)
    }

    /// What the attempts of one request found so far.
    struct AttemptHistory: Sendable {
        var attempts = 0
        var lastStatus: Int?
        var lastReason: String?
        var retries = RetryAttempts()

        /// The outcome when the next attempt cannot start: `expired` once `expiration` passed.
        func giveUp(_ status: DeviceResult.Status) -> DeliveryOutcome {
            DeliveryOutcome(status: status, apnsStatus: lastStatus, reason: lastReason, attempts: attempts)
        }
    }

    /// Attempts `request` until a final outcome, after the attempts `history` holds (after a
    /// failed one, the backoff comes first).
    func attempt(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        consumedAt: ContinuousClock.Instant,
        history: inout AttemptHistory,
        fence: SendFence
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        let clock = PipelineClock()
        let deadline = consumedAt + policy.deliveryDeadline
        var generator = PipelineRandom()
        if history.attempts > 0, let stop = try await pauseBeforeRetry(request, history: &history, deadline: deadline, fence: fence) {
            return stop
        }
        while true {
            if hasExpired(request, inAbout: .zero) { return history.giveUp(.expired) }
            let shedding = loadShedding.pause(until: deadline, using: &generator)
            if shedding > .zero, !fence.isClosed() {
                do { try await fence.wait(shedding, false) } catch { throw .cancelled }
            }
            if let stop = try stopBeforeAttempt(request, history: history, deadline: deadline, fence: fence) { return stop }

            history.attempts += 1
            let sentAt = clock.now
            let requestDeadline = min(sentAt + policy.requestTimeout, deadline)
            let answer: Result<APNSResponse, any Error>
            do {
                let client = request.isChannelRequest ? broadcastClient : client
                answer = .success(try await client.send(request, environment: environment, deadline: requestDeadline))
            } catch {
                answer = .failure(error)
            }
            if let outcome = try conclude(answer, sentAt: sentAt, history: &history, isCancelled: Task.isCancelled) {
                return outcome
            }
            if let stop = try await pauseBeforeRetry(request, history: &history, deadline: deadline, fence: fence) { return stop }
        }
    }

    /// The outcome when the next attempt must not start: `expired`, `failed` at the deadline;
    /// throws ``DeliveryStopped/fenced`` once `fence` is closed.
    func stopBeforeAttempt(
        _ request: APNSRequest,
        history: AttemptHistory,
        deadline: ContinuousClock.Instant,
        fence: SendFence
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        try Self.stopStatus(expired: hasExpired(request, inAbout: .zero), deadline: deadline, fence: fence).map(history.giveUp)
    }

    /// Why the next attempt of a notification must not start: `expired` once its expiration
    /// passed, `failed` at the deadline; throws ``DeliveryStopped/fenced`` once `fence` is closed.
    static func stopStatus(
        expired: Bool,
        deadline: ContinuousClock.Instant,
        fence: SendFence
    ) throws(DeliveryStopped) -> DeviceResult.Status? {
        if expired { return .expired }
        guard PipelineClock.now < deadline else { return .failed }
        if fence.isClosed() { throw .fenced }
        return nil
    }

    /// Reads the answer to the attempt counted last in `history`, sent at `sentAt`: the final
    /// outcome, or nil when another attempt may follow; throws ``DeliveryStopped/cancelled``
    /// when the sending task was cancelled before a final answer.
    func conclude(
        _ answer: Result<APNSResponse, any Error>,
        sentAt: ContinuousClock.Instant,
        history: inout AttemptHistory,
        isCancelled: Bool
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        let duration = sentAt.duration(to: PipelineClock.now)
        switch answer {
        case .success(let response):
            history.lastStatus = response.status
            history.lastReason = response.reason?.rawValue
            metrics.recordAttempt(status: response.status, reason: history.lastReason, duration: duration)
            switch Self.classify(response.status) {
            case .final(let status):
                return DeliveryOutcome(
                    status: status,
                    apnsStatus: response.status,
                    reason: response.reason?.rawValue,
                    attempts: history.attempts,
                    unregisteredAtMilliseconds: status == .unregistered
                        ? response.timestampMilliseconds ?? epochMilliseconds() : nil,
                    apnsUniqueID: response.uniqueID,
                    channelID: response.channelID,
                    body: response.body
                )
            case .retryThisToken:
                break
            case .retryAndSlowDown:
                loadShedding.recordOverload()
            }
        case .failure(is APNSNoCredentialError):
            return DeliveryOutcome(status: .rejected, apnsStatus: nil, reason: "NoCredentialForTopic", attempts: history.attempts - 1)
        case .failure(is APNSTokenAuthenticationRequiredError):
            let reason = "TokenAuthenticationRequired"
            return DeliveryOutcome(status: .rejected, apnsStatus: nil, reason: reason, attempts: history.attempts - 1)
        case .failure(let error as TransportError):
            history.lastStatus = nil
            history.lastReason = error.resultReason
            metrics.recordAttempt(status: nil, reason: history.lastReason, duration: duration)
            // A GOAWAY-refused stream or a full local queue says nothing about APNs' health.
            if error.isDeadlineExceeded || error.isConnectionFailure { loadShedding.recordOverload() }
        case .failure:
            if isCancelled { throw .cancelled }
        }
        if isCancelled { throw .cancelled }
        return nil
    }

    /// After a failed attempt: the outcome when no further attempt may follow, else waits the
    /// backoff (the fence's wait: a closing fence ends it) and returns nil. An attempt APNs
    /// answered (429, 5xx) delivered nothing, so its send waits without a send permit.
    private func pauseBeforeRetry(
        _ request: APNSRequest,
        history: inout AttemptHistory,
        deadline: ContinuousClock.Instant,
        fence: SendFence
    ) async throws(DeliveryStopped) -> DeliveryOutcome? {
        let wait = history.retries.delayAfterFailure(policy.backoff)
        guard history.attempts < policy.maxAttempts, PipelineClock.now + wait < deadline else { return history.giveUp(.failed) }
        if hasExpired(request, inAbout: wait) { return history.giveUp(.expired) }
        metrics.recordRetry(status: history.lastStatus, transportCause: history.lastReason)
        guard !fence.isClosed() else { return nil }
        do { try await fence.wait(wait, history.lastStatus != nil) } catch { throw .cancelled }
        return nil
    }

    /// Whether the request's `expiration` (UNIX seconds; 0 means "once, do not store" and never
    /// expires here) will have passed `delay` from now.
    private func hasExpired(_ request: APNSRequest, inAbout delay: Duration) -> Bool {
        hasExpired(request.expiration, inAbout: delay)
    }

    private enum Decision {
        case final(DeviceResult.Status)
        /// 429: this device token gets too many requests; back off this notification only.
        case retryThisToken
        /// 500, 503 and other 5xx: APNs is in trouble; back off and slow the whole sender.
        case retryAndSlowDown
    }

    /// Apple's rules: 2xx delivered (pushes get 200; channel management 201 and 204 too), 410
    /// unregistered, 429 and 5xx retried, the rest rejected.
    private static func classify(_ status: Int) -> Decision {
        switch status {
        case 200..<300: .final(.delivered)
        case 410: .final(.unregistered)
        case 429: .retryThisToken
        case 500...599: .retryAndSlowDown
        default: .final(.rejected)
        }
    }
}
