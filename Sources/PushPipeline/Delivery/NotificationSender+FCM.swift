import DeviceTokenStore
import ExactTime
public import FCMCore

/// Sending one notification to one Android device through FCM, with FCM's rules (DESIGN 6b as
/// the contract's section on FCM facts states them, by the FcmError detail, never the bare status):
///
/// - 200 is `delivered`; UNREGISTERED, or INVALID_ARGUMENT naming only the target, `unregistered`
///   (dated when the request was sent: FCM gives no timestamp); every other refusal `rejected`,
///   the token left alone.
/// - 429 and 5xx are retried with the same exponential backoff and jitter as APNs, and never
///   sooner than FCM's `Retry-After`; QUOTA_EXCEEDED waits at least 60 s before its retry.
/// - An expired access token is refreshed by the client, which sends once more.
/// - A package no credential serves (or no FCM client at all) is `rejected`,
///   `NoCredentialForPackage`, unsent.
/// - Attempts are bounded by ``RetryPolicy/maxAttempts``, time by ``RetryPolicy/deliveryDeadline``
///   (then `failed`); a notification whose `expiration` passes first is `expired`.
extension NotificationSender {
    /// Delivers `request` to its Android device. Before each attempt asks `fenced`, as
    /// ``deliver(_:environment:consumedAt:unless:)`` does.
    public func deliver(
        _ request: FCMRequest,
        consumedAt: ContinuousClock.Instant,
        unless fenced: () -> Bool = { false }
    ) async throws(DeliveryStopped) -> DeliveryOutcome {
        var history = FCMAttempts()
        guard let fcmClient else { return history.outcome(.rejected, reason: FCMNoCredentialError.resultReason) }
        let clock = ContinuousClock()
        let deadline = consumedAt + policy.deliveryDeadline
        while true {
            if hasExpired(request, inAbout: .zero) { return history.outcome(.expired) }
            guard clock.now < deadline else { return history.outcome(.failed) }
            if fenced() { throw .fenced }
            history.attempts += 1
            let sentAtMilliseconds = epochMilliseconds()
            var notBefore: Duration?
            do {
                let response = try await fcmClient.send(request, deadline: min(clock.now + policy.requestTimeout, deadline))
                history.last = (response.status, response.reason, response.messageName)
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
                    notBefore = retry.notBefore
                }
            } catch is FCMNoCredentialError {
                history.attempts -= 1
                return history.outcome(.rejected, reason: FCMNoCredentialError.resultReason)
            } catch let error as FCMTransportError {
                history.last = (nil, error.resultReason, nil)
            } catch {
                if Task.isCancelled { throw .cancelled }
                history.last = (nil, "\(type(of: error))", nil)
            }
            if Task.isCancelled { throw .cancelled }
            let wait = max(history.retries.delayAfterFailure(policy.backoff), notBefore ?? .zero)
            guard history.attempts < policy.maxAttempts, clock.now + wait < deadline else { return history.outcome(.failed) }
            if hasExpired(request, inAbout: wait) { return history.outcome(.expired) }
            do { try await RetryAttempts.wait(wait) } catch { throw .cancelled }
        }
    }

    /// Whether the request's `expiration` (UNIX seconds; 0 never expires here) will have passed
    /// `delay` from now.
    private func hasExpired(_ request: FCMRequest, inAbout delay: Duration) -> Bool {
        guard let expiration = request.expiration, expiration > 0 else { return false }
        return epochMilliseconds() + delay.wholeMilliseconds >= expiration * 1000
    }
}

/// What the attempts of one FCM request found so far.
private struct FCMAttempts {
    var attempts = 0
    /// FCM's status, reason and message name in its last answer (no status: no answer).
    var last: (status: Int?, reason: String?, messageName: String?) = (nil, nil, nil)
    var retries = RetryAttempts()

    /// The outcome with what the last answer said (`reason` instead of its reason when given).
    func outcome(_ status: DeliveryResult.Status, reason: String? = nil) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(status: status, apnsStatus: nil, reason: reason ?? last.reason, attempts: attempts)
        outcome.platform = .fcm
        outcome.fcmStatus = last.status
        outcome.fcmMessageID = status == .delivered ? last.messageName : nil
        return outcome
    }
}
