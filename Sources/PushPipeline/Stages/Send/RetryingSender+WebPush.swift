import PushStores
import PushCore
public import WebPushCore

/// Sending one notification to one browser subscription through its push service, with the
/// rules of RFC 8030 as docs/design.md states them:
///
/// - 201 (or 202) is `delivered`, with the message's `Location`; 404 and 410 `unregistered`
///   (dated when the request was sent); 400, 401, 403, 413 and any other 4xx but 429
///   `rejected`, nothing marked (401 and 403, the operator's VAPID key refused, are counted).
/// - 429 and 5xx are retried with the same exponential backoff and jitter as APNs and FCM, never
///   sooner than `Retry-After`; so are requests that got no answer.
/// - An app no VAPID key serves (or no web push client at all) is `rejected`,
///   `NoCredentialForApp`, unsent; an endpoint outside HERALD_WEBPUSH_ALLOWED_HOSTS `rejected`,
///   `invalid_token`, before any connection.
/// - Attempts are bounded by ``RetryPolicy/maxAttempts``, time by ``RetryPolicy/deliveryDeadline``
///   (then `failed`); a notification whose `expiration` passes first is `expired`.
extension RetryingSender {
    /// Delivers every request to its subscription, as ``deliverAll(_:consumedAt:fence:report:)``
    /// does for FCM: first attempts in one batch (``WebPushClientProtocol/sendAll(_:deadline:answered:)``),
    /// a task of its own for each request that must wait to be retried.
    public func deliverAll(
        _ requests: [WebPushRequest],
        consumedAt: ContinuousClock.Instant,
        fence: @escaping @Sendable (Int) -> SendFence,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        guard let webPushClient else {
            for index in requests.indices {
                report(index, .success(WebPushAttempts().outcome(.rejected, reason: WebPushNoCredentialError.resultReason)))
            }
            return
        }
        await deliverAll(requests, via: WebPushSending(sender: self, client: webPushClient), consumedAt: consumedAt, fence: fence, report: report)
    }

    /// Reads the answer to the attempt counted last in `history`: the final outcome, or nil when
    /// another attempt may follow; throws ``DeliveryStopped/cancelled`` when the sending task was
    /// cancelled before a final answer.
    fileprivate func conclude(
        _ answer: Result<WebPushResponse, any Error>,
        sentAtMilliseconds: Int64,
        history: inout WebPushAttempts,
        isCancelled: Bool
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        history.notBefore = nil
        switch answer {
        case .success(let response):
            (history.lastStatus, history.lastReason, history.location) = (response.status, response.reason, response.location)
            metrics.recordWebPushAttempt(status: response.status, cause: nil)
            switch response.decision {
            case .delivered:
                return history.outcome(.delivered)
            case .unregistered:
                var outcome = history.outcome(.unregistered)
                outcome.unregisteredAtMilliseconds = sentAtMilliseconds
                return outcome
            case .rejected:
                return history.outcome(.rejected)
            case .retry(let notBefore, _):
                history.notBefore = notBefore
            }
        case .failure(is WebPushNoCredentialError):
            history.attempts -= 1
            return history.outcome(.rejected, reason: WebPushNoCredentialError.resultReason)
        case .failure(is WebPushHostRefusedError):
            history.attempts -= 1
            return history.outcome(.rejected, reason: InputRejection.Code.invalidToken.rawValue)
        case .failure(let error as TransportError):
            (history.lastStatus, history.lastReason) = (nil, error.resultReason)
            metrics.recordWebPushAttempt(status: nil, cause: error.resultReason)
        case .failure(let error):
            if isCancelled { throw .cancelled }
            (history.lastStatus, history.lastReason) = (nil, "\(type(of: error))")
        }
        if isCancelled { throw .cancelled }
        return nil
    }
}

/// Web push's part in the shared attempt loop: its client and its answers read by
/// ``RetryingSender``'s rules above; nothing pauses an attempt.
private struct WebPushSending: PlatformSending {
    let sender: RetryingSender
    let client: any WebPushClientProtocol

    func send(_ request: WebPushRequest, deadline: ContinuousClock.Instant) async throws -> WebPushResponse {
        try await client.send(request, deadline: deadline)
    }

    func sendAll(
        _ requests: [WebPushRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<WebPushResponse, any Error>) -> Void
    ) async {
        await client.sendAll(requests, deadline: deadline, answered: answered)
    }

    func conclude(
        _ answer: Result<WebPushResponse, any Error>,
        of request: WebPushRequest,
        sentAtMilliseconds: Int64,
        history: inout WebPushAttempts,
        isCancelled: Bool
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        try sender.conclude(answer, sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: isCancelled)
    }

    func expiration(of request: WebPushRequest) -> Int64? { request.expiration }

    func pause(_ request: WebPushRequest, until deadline: ContinuousClock.Instant) -> Duration { .zero }

    func recordRetry(after history: WebPushAttempts) {
        sender.metrics.recordWebPushRetry(status: history.lastStatus, cause: history.lastReason)
    }
}

/// What the attempts of one web push request found so far.
struct WebPushAttempts: PlatformAttemptHistory {
    var attempts = 0
    /// The push service's status and reason in its last answer (no status: no answer, and the
    /// reason is the transport cause).
    var lastStatus: Int?
    var lastReason: String?
    /// The `Location` of the last answer.
    var location: String?
    var retries = RetryAttempts()
    /// The least wait before the next attempt that the last answer asked for.
    var notBefore: Duration?

    var lastWasAnswered: Bool { lastStatus != nil }

    /// The outcome with what the last answer said (`reason` instead of its reason when given).
    func outcome(_ status: DeviceResult.Status, reason: String? = nil) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(status: status, apnsStatus: nil, reason: reason ?? lastReason, attempts: attempts)
        outcome.platform = .webpush
        outcome.webPushStatus = lastStatus
        outcome.webPushLocation = status == .delivered ? location : nil
        return outcome
    }
}
