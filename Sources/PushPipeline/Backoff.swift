import APNSCore

/// Exponential backoff with "full jitter": after the n-th failed attempt the wait is uniform in
/// 0...min(initial * 2^(n-1), maximum), so callers that failed together do not retry together.
/// Every part of the pipeline that tries again (APNs requests, token-store and ledger calls,
/// publishes) waits by one of these, set in ``PipelineConfiguration``.
public struct Backoff: Sendable, Hashable {
    /// Upper bound of the first wait; doubles per failed attempt.
    public var initial: Duration
    /// Cap on any single wait.
    public var maximum: Duration

    public init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The largest wait after the `attempt`-th failed attempt (1-based).
    public func ceiling(afterAttempt attempt: Int) -> Duration {
        let doublings = min(max(attempt - 1, 0), 30)
        return min(initial * (1 << doublings), maximum)
    }

    /// A wait after the `attempt`-th failed attempt, uniform in 0...``ceiling(afterAttempt:)``.
    public func delay(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let ceiling = ceiling(afterAttempt: attempt)
        return .nanoseconds(Int64.random(in: 0...max(ceiling.wholeNanoseconds, 0), using: &generator))
    }
}

/// One operation's retry loop state: its failed attempts and the wait after each. A caller
/// tries, and on failure calls ``waitAfterFailure(_:)`` (or takes the delay to decide itself).
struct RetryAttempts {
    /// Failed attempts so far.
    private(set) var failures = 0
    private var generator = SystemRandomNumberGenerator()

    /// Counts a failed attempt and returns the wait before the next one.
    mutating func delayAfterFailure(_ backoff: Backoff) -> Duration {
        failures += 1
        return backoff.delay(afterAttempt: failures, using: &generator)
    }

    /// Counts a failed attempt and sleeps its backoff; throws only when cancelled.
    mutating func waitAfterFailure(_ backoff: Backoff) async throws(CancellationError) {
        try await Self.wait(delayAfterFailure(backoff))
    }

    /// Sleeps `delay`; throws only when cancelled.
    static func wait(_ delay: Duration) async throws(CancellationError) {
        do {
            try await Task.sleep(for: delay)
        } catch {
            throw CancellationError()
        }
    }
}
