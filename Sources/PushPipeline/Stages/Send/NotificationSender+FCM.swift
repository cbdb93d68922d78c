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
extension NotificationSender {
    /// Delivers `request` to its Android device. Before each attempt asks `fence`, and waits
    /// between attempts on it, as ``deliver(_:environment:consumedAt:fence:)`` does.
    public func deliver(
        _ request: FCMRequest,
        consumedAt: ContinuousClock.Instant,
        fence: SendFence = .open
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        var history = FCMAttempts()
        return try await attempt(request, consumedAt: consumedAt, history: &history, fence: fence)
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
        guard fcmClient != nil else {
            for index in requests.indices { report(index, .success(FCMAttempts().outcome(.rejected, reason: FCMNoCredentialError.resultReason))) }
            return
        }
        let deadline = consumedAt + policy.deliveryDeadline
        let retries = RetriesAfterFirstAnswers<FCMAttempts>()
        var generator = SystemRandomNumberGenerator()
        let first = requests.indices.filter { index in
            // A first attempt to a paused project waits in a task of its own, like a retry.
            guard !fcmProjects.isEngaged || fcmProjects.pause(project(of: requests[index]), until: deadline, using: &generator) == .zero else {
                retries.append(index, FCMAttempts())
                return false
            }
            do throws(DeliveryStopped) {
                guard let stop = try stopBeforeAttempt(requests[index], history: FCMAttempts(), deadline: deadline, fence: fence(index)) else {
                    return true
                }
                report(index, .success(stop))
            } catch {
                report(index, .failure(error))
            }
            return false
        }
        if !first.isEmpty {
            await sendFirstAttempts(first, of: requests, deadline: deadline, retries: retries, report: report)
        }
        await retries.sendAgain(report: report) { index, history throws(DeliveryStopped) in
            try await attempt(requests[index], consumedAt: consumedAt, history: &history, fence: fence(index))
        }
    }

    /// Sends the first attempts of `requests` at `indexes` as one batch; each answer is reported
    /// or, to be retried, added to `retries`.
    private func sendFirstAttempts(
        _ first: [Int],
        of requests: [FCMRequest],
        deadline: ContinuousClock.Instant,
        retries: RetriesAfterFirstAnswers<FCMAttempts>,
        report: @escaping @Sendable (Int, Result<DeliveryOutcome, DeliveryStopped>) -> Void
    ) async {
        guard let fcmClient else { return }
        let sentAtMilliseconds = epochMilliseconds()
        let requestDeadline = min(ContinuousClock.now + policy.requestTimeout, deadline)
        await fcmClient.sendAll(first.map { requests[$0] }, deadline: requestDeadline) { position, answer in
            let index = first[position]
            var history = FCMAttempts(attempts: 1)
            do throws(DeliveryStopped) {
                let isCancelled = Self.isCancellation(answer)
                if let outcome = try conclude(
                    answer, of: requests[index], sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: isCancelled)
                {
                    report(index, .success(outcome))
                } else {
                    retries.append(index, history)
                }
            } catch {
                report(index, .failure(error))
            }
        }
    }

    /// The project whose gate `request`'s sends go through: its Firebase project, or its package
    /// when the client cannot tell.
    private func project(of request: FCMRequest) -> String {
        fcmClient?.project(servingPackage: request.package) ?? request.package
    }

    /// Attempts `request` until a final outcome, after the attempts `history` holds (after an
    /// answer to retry, its wait comes first).
    private func attempt(
        _ request: FCMRequest,
        consumedAt: ContinuousClock.Instant,
        history: inout FCMAttempts,
        fence: SendFence
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        guard let fcmClient else { return history.outcome(.rejected, reason: FCMNoCredentialError.resultReason) }
        let deadline = consumedAt + policy.deliveryDeadline
        var generator = SystemRandomNumberGenerator()
        while true {
            if history.attempts > 0 {
                let wait = max(history.retries.delayAfterFailure(policy.backoff), history.notBefore ?? .zero)
                guard history.attempts < policy.maxAttempts, ContinuousClock.now + wait < deadline else { return history.outcome(.failed) }
                if hasExpired(request, inAbout: wait) { return history.outcome(.expired) }
                metrics.recordFCMRetry(status: history.last.status, reason: history.last.reason)
                // An answered attempt (429, 5xx) delivered nothing: its send waits without a permit.
                if !fence.isClosed() {
                    do { try await fence.wait(wait, history.last.status != nil) } catch { throw .cancelled }
                }
            }
            // A paused project's attempt waits without a permit: nothing of it is in flight.
            let paused = fcmProjects.isEngaged ? fcmProjects.pause(project(of: request), until: deadline, using: &generator) : .zero
            if paused > .zero, !fence.isClosed() {
                do { try await fence.wait(paused, true) } catch { throw .cancelled }
            }
            if let stop = try stopBeforeAttempt(request, history: history, deadline: deadline, fence: fence) { return stop }
            history.attempts += 1
            let sentAtMilliseconds = epochMilliseconds()
            let answer: Result<FCMResponse, any Error>
            do {
                answer = .success(try await fcmClient.send(request, deadline: min(ContinuousClock.now + policy.requestTimeout, deadline)))
            } catch {
                answer = .failure(error)
            }
            if let outcome = try conclude(answer, of: request, sentAtMilliseconds: sentAtMilliseconds, history: &history, isCancelled: Task.isCancelled) {
                return outcome
            }
        }
    }

    /// The outcome when the next attempt must not start: `expired`, `failed` at the deadline;
    /// throws ``DeliveryStopped/fenced`` once `fence` is closed.
    private func stopBeforeAttempt(
        _ request: FCMRequest,
        history: FCMAttempts,
        deadline: ContinuousClock.Instant,
        fence: SendFence
    ) throws(DeliveryStopped) -> DeliveryOutcome? {
        try Self.stopStatus(expired: hasExpired(request, inAbout: .zero), deadline: deadline, fence: fence).map { history.outcome($0) }
    }

    /// Reads the answer to the attempt counted last in `history`, sent at `sentAtMilliseconds`
    /// of the wall clock: the final outcome, or nil when another attempt may follow (its wait
    /// no shorter than `history.notBefore`); throws ``DeliveryStopped/cancelled`` when the
    /// sending task was cancelled before a final answer.
    private func conclude(
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
                    history.notBefore = wait * Double(1 << min(history.quotaAnswers - 1, 10)) * Double.random(in: 1...1.5)
                    if quota == .project { fcmProjects.closeForQuota(project(of: request), until: .now + wait) }
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

    /// Whether the request's `expiration` (UNIX seconds; 0 never expires here) will have passed
    /// `delay` from now.
    private func hasExpired(_ request: FCMRequest, inAbout delay: Duration) -> Bool {
        guard let expiration = request.expiration, expiration > 0 else { return false }
        return epochMilliseconds() + delay.wholeMilliseconds >= expiration * 1000
    }
}

/// What the attempts of one FCM request found so far.
struct FCMAttempts: Sendable {
    var attempts = 0
    /// FCM's status, reason and message name in its last answer (no status: no answer).
    var last: (status: Int?, reason: String?, messageName: String?) = (nil, nil, nil)
    var retries = RetryAttempts()
    /// The least wait before the next attempt that FCM's last answer asked for.
    var notBefore: Duration?
    /// How many of FCM's answers were QUOTA_EXCEEDED.
    var quotaAnswers = 0

    /// The outcome with what the last answer said (`reason` instead of its reason when given).
    func outcome(_ status: DeliveryResult.Status, reason: String? = nil) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(status: status, apnsStatus: nil, reason: reason ?? last.reason, attempts: attempts)
        outcome.platform = .fcm
        outcome.fcmStatus = last.status
        outcome.fcmMessageID = status == .delivered ? last.messageName : nil
        return outcome
    }
}
