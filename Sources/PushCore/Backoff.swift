/// Exponential backoff with jitter: after the n-th failed attempt the wait is drawn uniformly
/// between ``floorPercent`` % of the ceiling and the ceiling, min(initial * 2^(n-1), maximum),
/// so callers that failed together do not retry together. Every part of Herald that tries again
/// waits by one of these: APNs requests, token-store and ledger calls and publishes (full jitter,
/// set in the pipeline's configuration) and APNs reconnections (at least half the ceiling, so a
/// failing host is not hammered).
public struct Backoff: Sendable, Hashable {
    /// Upper bound of the first wait; doubles per failed attempt.
    public var initial: Duration
    /// Cap on any single wait.
    public var maximum: Duration
    /// The shortest wait as a percentage of the ceiling; 0 is "full jitter".
    public var floorPercent: Int

    public init(initial: Duration, maximum: Duration, floorPercent: Int = 0) {
        self.initial = initial
        self.maximum = maximum
        self.floorPercent = min(max(floorPercent, 0), 100)
    }

    /// The largest wait after the `attempt`-th failed attempt (1-based).
    public func ceiling(afterAttempt attempt: Int) -> Duration {
        let doublings = min(max(attempt - 1, 0), 30)
        return min(initial * (1 << doublings), maximum)
    }

    /// A wait after the `attempt`-th failed attempt: ``jittered(_:using:)`` of its ceiling.
    public func delay(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        jittered(ceiling(afterAttempt: attempt), using: &generator)
    }

    /// A wait drawn uniformly between ``floorPercent`` % of `ceiling` and `ceiling`.
    public func jittered(_ ceiling: Duration, using generator: inout some RandomNumberGenerator) -> Duration {
        let most = max(ceiling.wholeNanoseconds, 0)
        let least = most / 100 * Int64(floorPercent)
        return .nanoseconds(Int64.random(in: least...most, using: &generator))
    }
}
