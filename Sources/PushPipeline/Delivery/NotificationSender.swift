public import APNSCore
import Foundation

/// The final answer for one device after retries.
public struct DeliveryOutcome: Sendable, Hashable {
    public var status: DeliveryResult.Status
    public var apnsStatus: Int?
    public var reason: String?
    public var attempts: Int
    /// For `unregistered`: APNs' timestamp in milliseconds since 1970.
    public var unregisteredAtMilliseconds: Int64?
}

/// Sends one notification to one device with Apple's retry rules: success and 410 are final,
/// 429 and 5xx and transport failures are retried with full-jitter backoff within the attempt
/// and time budget, everything else is `rejected`.
public struct NotificationSender: Sendable {
    private let client: any APNSClientProtocol
    private let policy: RetryPolicy
    private let epochMilliseconds: @Sendable () -> Int64

    public init(
        client: any APNSClientProtocol,
        policy: RetryPolicy,
        epochMilliseconds: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) }
    ) {
        self.client = client
        self.policy = policy
        self.epochMilliseconds = epochMilliseconds
    }

    /// Delivers `request`; throws only `CancellationError` (the caller then reports nothing, so the
    /// message is not acknowledged and will be redelivered).
    public func deliver(
        _ request: APNSRequest,
        environment: APNSEnvironment,
        consumedAt: ContinuousClock.Instant
    ) async throws(CancellationError) -> DeliveryOutcome {
        let clock = ContinuousClock()
        let deadline = consumedAt + policy.deliveryDeadline
        var generator = SystemRandomNumberGenerator()
        var attempts = 0
        var lastStatus: Int?
        var lastReason: String?
        while true {
            if let expiration = request.expiration, expiration > 0, epochMilliseconds() >= expiration * 1000 {
                return DeliveryOutcome(status: .expired, apnsStatus: lastStatus, reason: lastReason, attempts: attempts)
            }
            attempts += 1
            let requestDeadline = min(clock.now + policy.requestTimeout, deadline)
            do {
                let response = try await client.send(request, environment: environment, deadline: requestDeadline)
                lastStatus = response.status
                lastReason = response.reason?.rawValue
                switch Self.classify(response) {
                case .final(let status):
                    return DeliveryOutcome(
                        status: status,
                        apnsStatus: response.status,
                        reason: response.reason?.rawValue,
                        attempts: attempts,
                        unregisteredAtMilliseconds: status == .unregistered
                            ? response.timestampMilliseconds ?? epochMilliseconds() : nil
                    )
                case .retry:
                    break
                }
            } catch is APNSTransportError {
                lastStatus = nil
                lastReason = nil
            } catch {
                if Task.isCancelled { throw CancellationError() }
            }
            try checkCancellation()
            let wait = policy.backoff(afterAttempt: attempts, using: &generator)
            guard attempts < policy.maxAttempts, clock.now + wait < deadline else {
                return DeliveryOutcome(status: .failed, apnsStatus: lastStatus, reason: lastReason, attempts: attempts)
            }
            do {
                try await Task.sleep(for: wait)
            } catch {
                throw CancellationError()
            }
        }
    }

    private enum Decision {
        case final(DeliveryResult.Status)
        case retry
    }

    /// Apple's rules: 200 delivered, 410 unregistered, 429 and 5xx retried, the rest rejected.
    private static func classify(_ response: APNSResponse) -> Decision {
        switch response.status {
        case 200: .final(.delivered)
        case 410: .final(.unregistered)
        case 429, 500...599: .retry
        default: .final(.rejected)
        }
    }

    private func checkCancellation() throws(CancellationError) {
        if Task.isCancelled { throw CancellationError() }
    }
}
