import PushStores
import PushCore
public import FCMCore

/// Sending one notification to one Android device through FCM, with FCM's rules (docs/design.md,
/// "Talking to FCM"), read by the FcmError detail, never the bare status:
///
/// - 200 is `delivered`; UNREGISTERED, or INVALID_ARGUMENT naming only the target, `unregistered`
///   (dated when the request was sent: FCM gives no timestamp); every other refusal `rejected`,
///   the token left alone.
/// - 429 and 5xx are retried with the same exponential backoff and jitter as APNs, and never
///   sooner than FCM's `Retry-After`. QUOTA_EXCEEDED waits at least
///   ``RetryPolicy/quotaExceededWait`` (a minute), doubled for each further one, plus a uniform
///   0 to 50 %; when it names the project's quota, every new attempt to that project pauses too,
///   and 500/503 slow the project's sends down (``FCMProjectGates``).
/// - An expired access token is refreshed by the client, which sends once more.
/// - A package no credential serves (or no FCM client at all) is `rejected`,
///   `NoCredentialForPackage`, unsent.
/// - Attempts are bounded by ``RetryPolicy/maxAttempts``, time by ``RetryPolicy/deliveryDeadline``
///   (then `failed`); a notification whose `expiration` passes first is `expired`.
extension RetryingSender {
    /// Delivers `request` to its Android device. Before each attempt asks `fence`, and waits
    /// between attempts on it, as ``deliver(_:environment:consumedAt:fence:)`` does.
    public func deliver(
        _ request: FCMRequest,
        consumedAt: ContinuousClock.Instant,
        fence: SendFence = .open
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        var history = FCMAttempts()
        guard let fcmClient else { return history.outcome(.rejected, reason: FCMNoCredentialError.resultReason) }
        return try await attempt(request, via: FCMSending(sender: self, client: fcmClient), consumedAt: consumedAt, history: &history, fence: fence)
    }

    /// Delivers every request to its Android device, each with the rules of
    /// ``deliver(_:consumedAt:fence:)``, and calls `report` once per request with its index and
    /// its outcome, or why it stopped without one (`fence(index)` is asked before each of its
    /// attempts and waited on between them), as each is known: for first answers on the thread they arrive on. The first
    /// attempts go to FCM as one batch (``FCMClientProtocol/sendAll(_:deadline:answered:)``); a
    /// request to retry waits its backoff in a task of its own, from when the batch was answered.
    /// Returns once every request was reported.
    public func deliverAll(
        _ requests: [FCMRequest],
        consumedAt: ContinuousClock.Instant,
        fence: @escaping @Sendable (Int) -> SendFence,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        guard let fcmClient else {
            for index in requests.indices { report(index, .success(FCMAttempts().outcome(.rejected, reason: FCMNoCredentialError.resultReason))) }
            return
        }
        await deliverAll(requests, via: FCMSending(sender: self, client: fcmClient), consumedAt: consumedAt, fence: fence, report: report)
    }

    /// The project whose gate `request`'s sends go through: its Firebase project, or its package
    /// when the client cannot tell.
    fileprivate func project(of request: FCMRequest) -> String {
        fcmClient?.project(servingPackage: request.package) ?? request.package
    }

    /// Reads the answer to the attempt counted last in `history`, sent at `sentAtMilliseconds`
    /// of the wall clock: the final outcome, or nil when another attempt may follow (its wait
    /// no shorter than `history.notBefore`); throws ``DeliveryStopped/cancelled`` when the
    /// sending task was cancelled before a final answer.
    fileprivate func conclude(
        _ answer: Result<FCMResponse, any Error>,
        of request: FCMRequest,
        sentAtMilliseconds: Int64,
        history: inout FCMAttempts,
        isCancelled: Bool
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        history.notBefore = nil
        switch answer {
        case .success(let response):
            history.last = (response.status, response.reason, response.messageName)
            metrics.recordFCMAttempt(status: response.status, reason: response.reason)
            switch response.decision {
            case .delivered:
                return history.outcome(.delivered)
            case .unregistered:
                var outcome = history.outcome(.unregistered)
                outcome.unregisteredAtMilliseconds = sentAtMilliseconds
                return outcome
            case .rejected, .refreshAccessToken:
                return history.outcome(.rejected)
            case .retry(let retry):
                history.notBefore = retry.notBefore
                if let quota = retry.quota {
                    history.quotaAnswers += 1
                    let wait = max(retry.notBefore ?? .zero, policy.quotaExceededWait)
                    var random = PipelineRandom()
                    history.notBefore = wait * Double(1 << min(history.quotaAnswers - 1, 10)) * Double.random(in: 1...1.5, using: &random)
                    if quota == .project { fcmProjects.closeForQuota(project(of: request), until: PipelineClock.now + wait) }
                } else if retry.serverTrouble {
                    fcmProjects.recordOverload(project(of: request))
                }
            }
        case .failure(is FCMNoCredentialError):
            history.attempts -= 1
            return history.outcome(.rejected, reason: FCMNoCredentialError.resultReason)
        case .failure(let error as TransportError):
            history.last = (nil, error.resultReason, nil)
            metrics.recordFCMAttempt(status: nil, reason: error.resultReason)
        case .failure(let error):
            if isCancelled { throw .cancelled }
            history.last = (nil, "\(type(of: error))", nil)
        }
        if isCancelled { throw .cancelled }
        return nil
    }
}

/// FCM's part in the shared attempt loop: its client, its answers read by ``RetryingSender``'s
/// rules above, and each project's gate.
private struct FCMSending: PlatformSending {
    let sender: RetryingSender
    let client: any FCMClientProtocol

    func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
        try await client.send(request, deadline: deadline)
    }

    func sendAll(
        _ requests: [FCMRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<FCMResponse, any Error>) -> Void
    ) async {
        await client.sendAll(requests, deadline: deadline, answered: answered)
    }

    func conclude(
        _ answer: Result<FCMResponse, any Error>,
        of request: FCMRequest,
        sentAtMilliseconds: Int64,
        history: inout FCMAttempts,
        isCancelled: Bool
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        try sender.conclude(answer, of: request, sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: isCancelled)
    }

    func expiration(of request: FCMRequest) -> Int64? { request.expiration }

    /// The pause of the request's project (after QUOTA_EXCEEDED, or while FCM struggles).
    func pause(_ request: FCMRequest, until deadline: ContinuousClock.Instant) -> Duration {
        guard sender.fcmProjects.isEngaged else { return .zero }
        var generator = PipelineRandom()
        return sender.fcmProjects.pause(sender.project(of: request), until: deadline, using: &generator)
    }

    func recordRetry(after history: FCMAttempts) {
        sender.metrics.recordFCMRetry(status: history.last.status, reason: history.last.reason)
    }
}

/// What the attempts of one FCM request found so far.
struct FCMAttempts: PlatformAttemptHistory {
    var attempts = 0
    /// FCM's status, reason and message name in its last answer (no status: no answer).
    var last: (status: Int?, reason: String?, messageName: String?) = (nil, nil, nil)
    var retries = RetryAttempts()
    /// The least wait before the next attempt that FCM's last answer asked for.
    var notBefore: Duration?
    /// How many of FCM's answers were QUOTA_EXCEEDED.
    var quotaAnswers = 0

    var lastWasAnswered: Bool { last.status != nil }

    /// The outcome with what the last answer said (`reason` instead of its reason when given).
    func outcome(_ status: DeviceResult.Status, reason: String? = nil) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(status: status, apnsStatus: nil, reason: reason ?? last.reason, attempts: attempts)
        outcome.platform = .fcm
        outcome.fcmStatus = last.status
        outcome.fcmMessageID = status == .delivered ? last.messageName : nil
        return outcome
    }
}
