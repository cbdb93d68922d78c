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
extension NotificationSender {
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
        let deadline = consumedAt + policy.deliveryDeadline
        let first = requests.indices.filter { index in
            do throws(DeliveryStopped) {
                guard let stop = try stopBeforeAttempt(requests[index], history: WebPushAttempts(), deadline: deadline, fence: fence(index)) else {
                    return true
                }
                report(index, .success(stop))
            } catch {
                report(index, .failure(error))
            }
            return false
        }
        let retries = RetriesAfterFirstAnswers<WebPushAttempts>()
        if !first.isEmpty {
            let sentAtMilliseconds = epochMilliseconds()
            let requestDeadline = min(ContinuousClock.now + policy.requestTimeout, deadline)
            await webPushClient.sendAll(first.map { requests[$0] }, deadline: requestDeadline) { position, answer in
                let index = first[position]
                var history = WebPushAttempts(attempts: 1)
                do throws(DeliveryStopped) {
                    if let outcome = try conclude(answer, sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: Self.isCancellation(answer)) {
                        report(index, .success(outcome))
                    } else {
                        retries.append(index, history)
                    }
                } catch {
                    report(index, .failure(error))
                }
            }
        }
        await retries.sendAgain(report: report) { index, history throws(DeliveryStopped) in
            try await attempt(requests[index], client: webPushClient, consumedAt: consumedAt, history: &history, fence: fence(index))
        }
    }

    /// Attempts `request` until a final outcome, after the attempts `history` holds (after an
    /// answer to retry, its wait comes first).
    private func attempt(
        _ request: WebPushRequest,
        client: any WebPushClientProtocol,
        consumedAt: ContinuousClock.Instant,
        history: inout WebPushAttempts,
        fence: SendFence
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        let deadline = consumedAt + policy.deliveryDeadline
        while true {
            if history.attempts > 0 {
                let wait = max(history.retries.delayAfterFailure(policy.backoff), history.notBefore ?? .zero)
                guard history.attempts < policy.maxAttempts, ContinuousClock.now + wait < deadline else { return history.outcome(.failed) }
                if hasExpired(request, inAbout: wait) { return history.outcome(.expired) }
                metrics.recordWebPushRetry(status: history.lastStatus, cause: history.lastReason)
                // An answered attempt (429, 5xx) delivered nothing: its send waits without a permit.
                if !fence.isClosed() {
                    do { try await fence.wait(wait, history.lastStatus != nil) } catch { throw .cancelled }
                }
            }
            if let stop = try stopBeforeAttempt(request, history: history, deadline: deadline, fence: fence) { return stop }
            history.attempts += 1
            let sentAtMilliseconds = epochMilliseconds()
            let answer: Result<WebPushResponse, any Error>
            do {
                answer = .success(try await client.send(request, deadline: min(ContinuousClock.now + policy.requestTimeout, deadline)))
            } catch {
                answer = .failure(error)
            }
            if let outcome = try conclude(answer, sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: Task.isCancelled) {
                return outcome
            }
        }
    }

    /// The outcome when the next attempt must not start: `expired`, `failed` at the deadline;
    /// throws ``DeliveryStopped/fenced`` once `fence` is closed.
    private func stopBeforeAttempt(
        _ request: WebPushRequest,
        history: WebPushAttempts,
        deadline: ContinuousClock.Instant,
        fence: SendFence
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        try Self.stopStatus(expired: hasExpired(request, inAbout: .zero), deadline: deadline, fence: fence).map { history.outcome($0) }
    }

    /// Reads the answer to the attempt counted last in `history`: the final outcome, or nil when
    /// another attempt may follow; throws ``DeliveryStopped/cancelled`` when the sending task was
    /// cancelled before a final answer.
    private func conclude(
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

    /// Whether the request's expiry (UNIX seconds; 0 never expires here) will have passed `delay` from now.
    private func hasExpired(_ request: WebPushRequest, inAbout delay: Duration) -> Bool {
        guard let expiration = request.expiration, expiration > 0 else { return false }
        return epochMilliseconds() + delay.wholeMilliseconds >= expiration * 1000
    }
}

/// What the attempts of one web push request found so far.
struct WebPushAttempts: Sendable {
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

    /// The outcome with what the last answer said (`reason` instead of its reason when given).
    func outcome(_ status: DeliveryResult.Status, reason: String? = nil) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(status: status, apnsStatus: nil, reason: reason ?? lastReason, attempts: attempts)
        outcome.platform = .webpush
        outcome.webPushStatus = lastStatus
        outcome.webPushLocation = status == .delivered ? location : nil
        return outcome
    }
}
