/// How long and how often Herald tries one notification before reporting `failed`.
public struct RetryPolicy: Sendable, Hashable {
    /// Attempts per notification, the first included (HERALD_RETRY_MAX_ATTEMPTS).
    public var maxAttempts: Int
    /// Time from consuming the event after which no new attempt starts (HERALD_DELIVERY_DEADLINE_S).
    public var deliveryDeadline: Duration
    /// Longest wait for APNs' answer to one request.
    public var requestTimeout: Duration
    /// Upper bound of the first backoff; doubles per attempt.
    public var initialBackoff: Duration
    /// Cap on any single backoff.
    public var maximumBackoff: Duration
    /// How the whole sender slows down while APNs answers 500/503 or connections fail.
    public var loadShedding: LoadSheddingPolicy

    public init(
        maxAttempts: Int = 12,
        deliveryDeadline: Duration = .seconds(300),
        requestTimeout: Duration = .seconds(10),
        initialBackoff: Duration = .milliseconds(100),
        maximumBackoff: Duration = .seconds(30),
        loadShedding: LoadSheddingPolicy = LoadSheddingPolicy()
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.deliveryDeadline = deliveryDeadline
        self.requestTimeout = requestTimeout
        self.initialBackoff = initialBackoff
        self.maximumBackoff = maximumBackoff
        self.loadShedding = loadShedding
    }

    /// The largest wait after the `attempt`-th failed attempt (1-based): exponential, capped.
    public func backoffCeiling(afterAttempt attempt: Int) -> Duration {
        let doublings = min(max(attempt - 1, 0), 30)
        let ceiling = initialBackoff * (1 << doublings)
        return min(ceiling, maximumBackoff)
    }

    /// The wait after the `attempt`-th failed attempt: "full jitter", uniform in 0...ceiling,
    /// so clients that failed together do not retry together.
    public func backoff(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let ceiling = backoffCeiling(afterAttempt: attempt)
        let nanoseconds = ceiling.components.seconds * 1_000_000_000 + ceiling.components.attoseconds / 1_000_000_000
        return .nanoseconds(Int64.random(in: 0...max(nanoseconds, 0), using: &generator))
    }
}
